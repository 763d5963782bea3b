package vip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// IP header layout (RFC 791, RFC 8200), the fields the path reads:
//
//	IPv4: byte 0 version (high 4 bits) and IHL (low 4 bits, in 32-bit
//	      words, at least 5); bytes 2-3 total length; bytes 6-7 flags
//	      (DF 0x4000, MF 0x2000) and fragment offset (low 13 bits, in 8-byte
//	      units); byte 9 protocol; bytes 12-15 source; bytes 16-19
//	      destination.
//	IPv6: byte 0 version (high 4 bits); bytes 4-5 payload length (the
//	      bytes after the 40-byte header); byte 6 next header; bytes 8-23
//	      source; bytes 24-39 destination.
const (
	ipv4MinHeader = 20
	ipv6Header    = 40

	protoICMPv4 = 1
	protoICMPv6 = 58
)

// Header is what the packet path reads of an IP packet.
type Header struct {
	Version   int        // 4 or 6
	HeaderLen int        // IPv4: IHL*4; IPv6: 40 (extension headers are payload)
	TotalLen  int        // the whole packet, header included
	Protocol  uint8      // IPv4 protocol; IPv6 next header
	Src, Dst  netip.Addr // the addresses
	// IPv4 only: the don't-fragment and more-fragments flags and the
	// fragment offset in bytes (a packet that is not a first fragment gets
	// no ICMP error). IPv6 fragments are told by their Fragment header
	// (transportOf).
	DontFragment  bool
	MoreFragments bool
	FragOffset    int
}

// ErrMalformed matches every PacketError.
var ErrMalformed = errors.New("vip: malformed packet")

// Problem is what is wrong with a malformed packet.
type Problem int

// The problems Parse names.
const (
	ProblemEmpty      Problem = iota + 1 // no bytes at all
	ProblemVersion                       // version neither 4 nor 6
	ProblemShort                         // shorter than the fixed header
	ProblemHeaderLen                     // IPv4 IHL below 5 or beyond the packet
	ProblemTotalLen                      // IPv4 total length below the header or not the packet's length
	ProblemPayloadLen                    // IPv6 payload length not the packet's length less 40
)

var problemText = map[Problem]string{
	ProblemEmpty:      "empty packet",
	ProblemVersion:    "IP version neither 4 nor 6",
	ProblemShort:      "shorter than the fixed IP header",
	ProblemHeaderLen:  "IPv4 header length below 20 bytes or beyond the packet",
	ProblemTotalLen:   "IPv4 total length disagrees with the packet",
	ProblemPayloadLen: "IPv6 payload length disagrees with the packet",
}

func (p Problem) String() string {
	if s, ok := problemText[p]; ok {
		return s
	}
	return fmt.Sprintf("problem %d", int(p))
}

// PacketError is Parse's refusal: what was wrong, the value the packet
// claimed (Got) and what its length allows (Want), in bytes except for
// ProblemVersion (Got is the version).
type PacketError struct {
	Problem   Problem
	Got, Want int
}

func (e *PacketError) Error() string {
	switch e.Problem {
	case ProblemEmpty:
		return "vip: malformed packet: " + e.Problem.String()
	case ProblemVersion:
		return fmt.Sprintf("vip: malformed packet: %s (version %d)", e.Problem, e.Got)
	}
	return fmt.Sprintf("vip: malformed packet: %s (claims %d bytes, packet allows %d)", e.Problem, e.Got, e.Want)
}

func (e *PacketError) Unwrap() error { return ErrMalformed }

// Parse reads the header of the IP packet pkt, which must be exactly one
// packet: an IPv4 total length or IPv6 payload length that disagrees with
// len(pkt) is refused, as is every header that does not fit. IPv6
// jumbograms (payload length 0) are refused too: the tunnel carries at
// most 65535 bytes.
func Parse(pkt []byte) (Header, error) {
	if len(pkt) == 0 {
		return Header{}, &PacketError{Problem: ProblemEmpty}
	}
	switch v := int(pkt[0] >> 4); v {
	case 4:
		if len(pkt) < ipv4MinHeader {
			return Header{}, &PacketError{Problem: ProblemShort, Got: len(pkt), Want: ipv4MinHeader}
		}
		hl := int(pkt[0]&0x0f) * 4
		if hl < ipv4MinHeader || hl > len(pkt) {
			return Header{}, &PacketError{Problem: ProblemHeaderLen, Got: hl, Want: len(pkt)}
		}
		tl := int(binary.BigEndian.Uint16(pkt[2:4]))
		if tl != len(pkt) {
			return Header{}, &PacketError{Problem: ProblemTotalLen, Got: tl, Want: len(pkt)}
		}
		frag := binary.BigEndian.Uint16(pkt[6:8])
		return Header{
			Version:       4,
			HeaderLen:     hl,
			TotalLen:      tl,
			Protocol:      pkt[9],
			Src:           netip.AddrFrom4([4]byte(pkt[12:16])),
			Dst:           netip.AddrFrom4([4]byte(pkt[16:20])),
			DontFragment:  frag&0x4000 != 0,
			MoreFragments: frag&0x2000 != 0,
			FragOffset:    int(frag&0x1fff) * 8,
		}, nil
	case 6:
		if len(pkt) < ipv6Header {
			return Header{}, &PacketError{Problem: ProblemShort, Got: len(pkt), Want: ipv6Header}
		}
		pl := int(binary.BigEndian.Uint16(pkt[4:6]))
		if pl+ipv6Header != len(pkt) {
			return Header{}, &PacketError{Problem: ProblemPayloadLen, Got: pl + ipv6Header, Want: len(pkt)}
		}
		return Header{
			Version:   6,
			HeaderLen: ipv6Header,
			TotalLen:  len(pkt),
			Protocol:  pkt[6],
			Src:       netip.AddrFrom16([16]byte(pkt[8:24])),
			Dst:       netip.AddrFrom16([16]byte(pkt[24:40])),
		}, nil
	default:
		return Header{}, &PacketError{Problem: ProblemVersion, Got: v}
	}
}

// isICMPError reports whether pkt (parsed as h) is an ICMP error message,
// about which no ICMP error is sent (RFC 1122 3.2.2, RFC 4443 2.4 e.1):
// ICMPv4 types 3, 4, 5, 11, 12; ICMPv6 types below 128, found behind
// any IPv6 extension headers (transportOf).
func isICMPError(h Header, pkt []byte) bool {
	t, err := transportOf(h, pkt)
	return err == nil && !t.fragment && t.isICMPError()
}
