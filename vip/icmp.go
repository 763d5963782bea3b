package vip

import (
	"encoding/binary"
	"net/netip"
)

// ICMP errors the path writes back into the device (RFC 792, RFC 4443).
// Each goes to the offending packet's source and comes from its
// destination (the host behind the tunnel speaks for the path; a source of
// the node's own address would be a martian to the kernel).
//
//	ICMPv4 (IP header of 20 bytes, protocol 1, TTL 64, then):
//	  byte 0 type, 1 code, 2-3 checksum (of the ICMP message),
//	  4-7 type-specific (fragmentation needed: 4-5 unused, 6-7 next-hop
//	  MTU, RFC 1191), then the offending packet's IP header and its first
//	  8 bytes of data.
//	ICMPv6 (IPv6 header, next header 58, hop limit 64, then):
//	  byte 0 type, 1 code, 2-3 checksum (with the pseudo-header of RFC 8200
//	  8.1), 4-7 type-specific (packet too big: the MTU), then as much of
//	  the offending packet as keeps the whole at most 1280 bytes.
const (
	icmpv4DestUnreachable = 3
	icmpv4CodeHost        = 1  // host unreachable
	icmpv4CodeFragNeeded  = 4  // fragmentation needed and DF set
	icmpv4CodeProhibited  = 13 // communication administratively prohibited (RFC 1812 5.2.7.1)

	icmpv6DestUnreachable = 1
	icmpv6CodeAddress     = 3 // address unreachable
	icmpv6CodeProhibited  = 1 // communication with destination administratively prohibited
	icmpv6PacketTooBig    = 2

	icmpHeader   = 8
	ipv6MinMTU   = 1280
	icmpHopLimit = 64
)

// icmpTooBig is the ICMP error telling pkt's sender that pkt exceeds mtu:
// ICMPv4 fragmentation needed with the next-hop MTU, ICMPv6 packet too
// big. Nil when no error is due (see icmpDue).
func icmpTooBig(h Header, pkt []byte, mtu int) []byte {
	if !icmpDue(h, pkt) {
		return nil
	}
	if h.Version == 4 {
		var rest [4]byte
		binary.BigEndian.PutUint16(rest[2:], uint16(min(mtu, 0xffff)))
		return icmpv4(h, pkt, icmpv4DestUnreachable, icmpv4CodeFragNeeded, rest)
	}
	var rest [4]byte
	binary.BigEndian.PutUint32(rest[:], uint32(mtu))
	return icmpv6(h, pkt, icmpv6PacketTooBig, 0, rest)
}

// icmpUnreachable is the ICMP error telling pkt's sender that no node
// holds its destination: ICMPv4 host unreachable, ICMPv6 address
// unreachable. Nil when no error is due.
func icmpUnreachable(h Header, pkt []byte) []byte {
	if !icmpDue(h, pkt) {
		return nil
	}
	if h.Version == 4 {
		return icmpv4(h, pkt, icmpv4DestUnreachable, icmpv4CodeHost, [4]byte{})
	}
	return icmpv6(h, pkt, icmpv6DestUnreachable, icmpv6CodeAddress, [4]byte{})
}

// icmpProhibited is the ICMP error telling pkt's sender that the
// receiving node's access rules refuse it: ICMPv4 communication
// administratively prohibited, ICMPv6 the same. Nil when no error is due.
func icmpProhibited(h Header, pkt []byte) []byte {
	if !icmpDue(h, pkt) {
		return nil
	}
	if h.Version == 4 {
		return icmpv4(h, pkt, icmpv4DestUnreachable, icmpv4CodeProhibited, [4]byte{})
	}
	return icmpv6(h, pkt, icmpv6DestUnreachable, icmpv6CodeProhibited, [4]byte{})
}

// icmpDue reports whether an ICMP error about pkt may be sent: not about
// an ICMP error (behind IPv6 extension headers too), a non-first fragment
// (IPv4, or IPv6 by its fragment header), a packet whose ICMP or IPv6
// extension headers do not fit it (it might be an error), or a packet
// from or to an address that is not a single host's (RFC 1122 3.2.2, RFC
// 4443 2.4 e).
func icmpDue(h Header, pkt []byte) bool {
	t, err := transportOf(h, pkt)
	if err != nil && (isICMPProto(h.Version, t.proto) || h.Version == 6 && isExtHeader(t.proto)) {
		return false
	}
	if t.fragment || t.isICMPError() {
		return false
	}
	for _, a := range []netip.Addr{h.Src, h.Dst} {
		if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() || (a.Is4() && a.As4() == [4]byte{255, 255, 255, 255}) {
			return false
		}
	}
	return true
}

func icmpv4(h Header, pkt []byte, typ, code byte, rest [4]byte) []byte {
	quote := pkt[:min(len(pkt), h.HeaderLen+8)]
	out := make([]byte, ipv4MinHeader+icmpHeader+len(quote))
	out[0] = 0x45
	binary.BigEndian.PutUint16(out[2:], uint16(len(out)))
	out[8] = icmpHopLimit
	out[9] = protoICMPv4
	dst, src := h.Src.As4(), h.Dst.As4()
	copy(out[12:16], src[:])
	copy(out[16:20], dst[:])
	binary.BigEndian.PutUint16(out[10:], checksum(0, out[:ipv4MinHeader]))
	m := out[ipv4MinHeader:]
	m[0], m[1] = typ, code
	copy(m[4:8], rest[:])
	copy(m[icmpHeader:], quote)
	binary.BigEndian.PutUint16(m[2:], checksum(0, m))
	return out
}

func icmpv6(h Header, pkt []byte, typ, code byte, rest [4]byte) []byte {
	quote := pkt[:min(len(pkt), ipv6MinMTU-ipv6Header-icmpHeader)]
	out := make([]byte, ipv6Header+icmpHeader+len(quote))
	out[0] = 0x60
	binary.BigEndian.PutUint16(out[4:], uint16(icmpHeader+len(quote)))
	out[6] = protoICMPv6
	out[7] = icmpHopLimit
	dst, src := h.Src.As16(), h.Dst.As16()
	copy(out[8:24], src[:])
	copy(out[24:40], dst[:])
	m := out[ipv6Header:]
	m[0], m[1] = typ, code
	copy(m[4:8], rest[:])
	copy(m[icmpHeader:], quote)
	binary.BigEndian.PutUint16(m[2:], checksum(pseudoSum6(out[8:40], len(m)), m))
	return out
}

// pseudoSum6 is the partial sum of the IPv6 pseudo-header of an ICMPv6
// message of length n: source and destination (addrs, 32 bytes), the
// upper-layer length and next header 58.
func pseudoSum6(addrs []byte, n int) uint32 {
	var s uint32
	for i := 0; i+1 < len(addrs); i += 2 {
		s += uint32(binary.BigEndian.Uint16(addrs[i:]))
	}
	s += uint32(n>>16) + uint32(n&0xffff)
	s += protoICMPv6
	return s
}

// checksum is the Internet checksum (RFC 1071) of b, starting from the
// partial sum initial.
func checksum(initial uint32, b []byte) uint16 {
	s := initial
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
