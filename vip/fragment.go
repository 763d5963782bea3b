package vip

import (
	"errors"
	"fmt"
)

// What a fragment may carry (issue 32). The access rules judge a packet
// by its transport header, which only a first fragment holds; a later
// fragment passes when its protocol is allowed at some port, since the
// kernel reassembles it only with a first fragment the rules judged.
// That holds only when the first fragment shows the header the kernel
// will read, so a peer's packet is dropped (dropBadFragment, with or
// without rules) when it is
//
//   - an IPv6 packet with a Fragment header behind another (RFC 8200 4.1:
//     each extension header at most once, the Fragment header included):
//     a later fragment nested in a first or atomic one would otherwise
//     reach the kernel unjudged, and the kernel reassembles the inner one
//     after the outer;
//   - a first fragment (IPv4 MF set, offset 0; IPv6 Fragment header with
//     M set, offset 0) that does not hold the whole upper-layer header
//     (RFC 7112: the whole header chain; TCP minTCPHeader bytes, UDP 8,
//     ICMP icmpHeader), whose ports or type would come from a later,
//     unjudged fragment.
//
// Atomic fragments (an IPv6 Fragment header with offset 0 and M clear,
// RFC 6946) are whole packets and judged as such; so are IPv4 packets
// with DF. The walk stops at a later fragment's Fragment header: what
// follows it is the fragment's data, not headers.

// minTCPHeader is a TCP header without options.
const minTCPHeader = 20

// ErrBadFragment matches every FragmentError.
var ErrBadFragment = errors.New("vip: fragment the access rules cannot judge")

// FragmentError is transportOf's refusal of a fragment (see above).
type FragmentError struct {
	Why string // "a Fragment header behind another", "a first fragment with 14 bytes of its TCP header, of 20"
}

func (e *FragmentError) Error() string { return fmt.Sprintf("%v: %s", ErrBadFragment, e.Why) }

// Unwrap: ErrBadFragment, and ErrMalformed (no sender produces one).
func (e *FragmentError) Unwrap() []error { return []error{ErrBadFragment, ErrMalformed} }

// upperHeaderLen is the bytes of the upper-layer header proto a first
// fragment must hold (0: a protocol the path does not read).
func upperHeaderLen(version int, proto uint8) int {
	switch {
	case proto == protoTCP:
		return minTCPHeader
	case proto == protoUDP:
		return 8
	case isICMPProto(version, proto):
		return icmpHeader
	}
	return 0
}

// firstFragmentShort refuses a first fragment that holds fewer than the
// whole upper-layer header: have bytes of it, from off.
func firstFragmentShort(version int, proto uint8, have int) error {
	if need := upperHeaderLen(version, proto); have < need {
		return &FragmentError{Why: fmt.Sprintf("a first fragment with %d bytes of its %s header, of %d", have, transport{proto: proto}.name(), need)}
	}
	return nil
}

// cut is e, the header chain cut short, as a first fragment's refusal
// when first.
func cut(first bool, e *TransportError) error {
	if first {
		return &FragmentError{Why: "a first fragment without its whole header chain: " + e.What + " beyond it"}
	}
	return e
}

// maybeFragment reports whether a packet (parsed as h) may be a fragment
// or hold a Fragment header: the only packets admit walks when there
// are no access rules.
func maybeFragment(h Header) bool {
	if h.Version == 4 {
		return h.MoreFragments || h.FragOffset != 0
	}
	return isExtHeader(h.Protocol)
}
