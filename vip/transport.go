package vip

import (
	"encoding/binary"
	"fmt"
	"strconv"
)

// The transport header behind the IP header, as the access rules and the
// ICMP answers read it (RFC 8200 4, RFC 9293 3.1, RFC 768, RFC 792,
// RFC 4443):
//
//	IPv6 extension headers, walked from the IPv6 header's next header:
//	  hop-by-hop options (0), routing (43), destination options (60):
//	    byte 0 next header, byte 1 length in 8-byte units not counting
//	    the first 8;
//	  fragment (44): byte 0 next header, bytes 2-3 the fragment offset
//	    (high 13 bits, in 8-byte units) and the M flag (low bit, more
//	    fragments follow), 8 bytes in all; at most one (fragment.go);
//	  authentication (51): byte 0 next header, byte 1 length in 4-byte
//	    units less 2.
//	  At most maxExtHeaders are walked; ESP (50) and no next header (59)
//	  end the walk (nothing readable follows).
//	TCP: bytes 0-1 source port, 2-3 destination port, 13 flags (SYN 0x02,
//	  ACK 0x10); UDP: bytes 0-1 source port, 2-3 destination port.
//	ICMPv4 / ICMPv6: byte 0 type, 1 code; echo request and reply (ICMPv4
//	  8 and 0, ICMPv6 128 and 129): bytes 4-5 identifier.
const (
	protoTCP      = 6
	protoUDP      = 17
	extHopByHop   = 0
	extRouting    = 43
	extFragment   = 44
	extESP        = 50
	extAuth       = 51
	extNone       = 59
	extDestOpts   = 60
	maxExtHeaders = 8

	tcpSYN = 0x02
	tcpACK = 0x10

	icmpv4EchoReply   = 0
	icmpv4EchoRequest = 8
	icmpv6EchoRequest = 128
	icmpv6EchoReply   = 129
)

// transport is what the path reads of a packet's transport header.
type transport struct {
	proto uint8 // the upper-layer protocol (after IPv6 extension headers)
	// off is where its header starts; fragment says the packet is a
	// fragment other than the first, which holds no transport header.
	off      int
	fragment bool
	// ports says srcPort and dstPort were read (TCP and UDP); flags is
	// TCP's.
	ports            bool
	srcPort, dstPort uint16
	flags            uint8
	// icmp says icmpType and icmpCode were read (ICMPv4 for IPv4,
	// ICMPv6 for IPv6); echoID is an echo request's or reply's
	// identifier.
	icmp               bool
	icmpType, icmpCode uint8
	echoID             uint16
}

// TransportError is transportOf's refusal: the header named (an IPv6
// extension header, or the transport header) does not fit in the packet,
// or there are too many extension headers.
type TransportError struct {
	What   string // "extension header 44", "TCP header", "too many extension headers"
	At     int    // where it starts
	Needs  int    // bytes it needs from there
	Packet int    // the packet's length
}

func (e *TransportError) Error() string {
	if e.Needs == 0 {
		return fmt.Sprintf("vip: malformed packet: %s (more than %d)", e.What, maxExtHeaders)
	}
	return fmt.Sprintf("vip: malformed packet: %s at byte %d needs %d bytes, packet has %d", e.What, e.At, e.Needs, e.Packet)
}

func (e *TransportError) Unwrap() error { return ErrMalformed }

// isExtHeader reports whether proto is an IPv6 extension header
// transportOf walks.
func isExtHeader(proto uint8) bool {
	switch proto {
	case extHopByHop, extRouting, extDestOpts, extFragment, extAuth:
		return true
	}
	return false
}

// isICMPProto reports whether proto is the ICMP of IP version v.
func isICMPProto(v int, proto uint8) bool {
	return (v == 4 && proto == protoICMPv4) || (v == 6 && proto == protoICMPv6)
}

// transportOf reads the transport header of pkt (parsed as h by Parse),
// walking IPv6 extension headers. A non-first fragment, and protocols it
// does not read, yield what is known (proto, fragment) without error; a
// fragment that cannot be judged (fragment.go) is a *FragmentError.
func transportOf(h Header, pkt []byte) (transport, error) {
	t := transport{proto: h.Protocol, off: h.HeaderLen, fragment: h.FragOffset != 0}
	first := h.MoreFragments && h.FragOffset == 0 // IPv4; IPv6 below
	if h.Version == 6 {
		seenFragment := false
		for i := 0; !t.fragment; i++ {
			var size int
			switch t.proto {
			case extHopByHop, extRouting, extDestOpts:
				if t.off+2 > len(pkt) {
					return t, cut(first, &TransportError{What: fmt.Sprintf("extension header %d", t.proto), At: t.off, Needs: 2, Packet: len(pkt)})
				}
				size = (int(pkt[t.off+1]) + 1) * 8
			case extFragment:
				size = 8
			case extAuth:
				if t.off+2 > len(pkt) {
					return t, cut(first, &TransportError{What: "extension header 51", At: t.off, Needs: 2, Packet: len(pkt)})
				}
				size = (int(pkt[t.off+1]) + 2) * 4
			default:
				size = 0
			}
			if size == 0 {
				break
			}
			if i == maxExtHeaders {
				return t, &TransportError{What: "too many extension headers"}
			}
			if t.off+size > len(pkt) {
				return t, cut(first, &TransportError{What: fmt.Sprintf("extension header %d", t.proto), At: t.off, Needs: size, Packet: len(pkt)})
			}
			if t.proto == extFragment {
				if seenFragment {
					return t, &FragmentError{Why: "a Fragment header behind another"}
				}
				seenFragment = true
				offM := binary.BigEndian.Uint16(pkt[t.off+2:])
				t.fragment = offM>>3 != 0 // then what follows is data: the walk ends
				first = offM>>3 == 0 && offM&1 != 0
			}
			t.proto = pkt[t.off]
			t.off += size
		}
	}
	if t.fragment {
		return t, nil
	}
	rest := pkt[t.off:]
	if first {
		if err := firstFragmentShort(h.Version, t.proto, len(rest)); err != nil {
			return t, err
		}
	}
	switch {
	case t.proto == protoTCP:
		if len(rest) < 14 {
			return t, &TransportError{What: "TCP header", At: t.off, Needs: 14, Packet: len(pkt)}
		}
		t.ports, t.flags = true, rest[13]
	case t.proto == protoUDP:
		if len(rest) < 8 {
			return t, &TransportError{What: "UDP header", At: t.off, Needs: 8, Packet: len(pkt)}
		}
		t.ports = true
	case isICMPProto(h.Version, t.proto):
		if len(rest) < icmpHeader {
			return t, &TransportError{What: "ICMP header", At: t.off, Needs: icmpHeader, Packet: len(pkt)}
		}
		t.icmp, t.icmpType, t.icmpCode = true, rest[0], rest[1]
		if t.isEcho() {
			t.echoID = binary.BigEndian.Uint16(rest[4:])
		}
		return t, nil
	default:
		return t, nil
	}
	t.srcPort, t.dstPort = binary.BigEndian.Uint16(rest), binary.BigEndian.Uint16(rest[2:])
	return t, nil
}

// isEcho reports an ICMP echo request or reply.
func (t transport) isEcho() bool {
	if !t.icmp {
		return false
	}
	if t.proto == protoICMPv4 {
		return t.icmpType == icmpv4EchoRequest || t.icmpType == icmpv4EchoReply
	}
	return t.icmpType == icmpv6EchoRequest || t.icmpType == icmpv6EchoReply
}

// isEchoRequest and isEchoReply tell the two kinds of echo apart.
func (t transport) isEchoRequest() bool {
	return t.isEcho() && (t.icmpType == icmpv4EchoRequest || t.icmpType == icmpv6EchoRequest)
}

func (t transport) isEchoReply() bool {
	return t.isEcho() && (t.icmpType == icmpv4EchoReply || t.icmpType == icmpv6EchoReply)
}

// name is the protocol for logs.
func (t transport) name() string {
	switch {
	case t.proto == protoTCP:
		return "tcp"
	case t.proto == protoUDP:
		return "udp"
	case t.proto == protoICMPv4:
		return "icmp"
	case t.proto == protoICMPv6:
		return "icmpv6"
	}
	return "protocol " + strconv.Itoa(int(t.proto))
}

// isICMPError reports an ICMP error message (RFC 1122 3.2.2, RFC 4443
// 2.4 e.1): ICMPv4 types 3, 4, 5, 11, 12; ICMPv6 types below 128.
func (t transport) isICMPError() bool {
	if !t.icmp {
		return false
	}
	if t.proto == protoICMPv4 {
		switch t.icmpType {
		case 3, 4, 5, 11, 12:
			return true
		}
		return false
	}
	return t.icmpType < 128
}
