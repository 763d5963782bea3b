package vip

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
)

// frag6 is an IPv6 Fragment header: next header, offset in bytes, M.
func frag6(next byte, off int, more bool) []byte {
	b := ext(extFragment, next, 8, off)
	if more {
		b[3] |= 1
	}
	return b
}

// frag4 is an IPv4 fragment: MF and the offset in bytes set, DF clear.
func frag4(src, dst netip.Addr, proto byte, off int, more bool, payload []byte) []byte {
	p := ipv4(src, dst, proto, payload)
	f := uint16(off / 8)
	if more {
		f |= 0x2000
	}
	binary.BigEndian.PutUint16(p[6:], f)
	binary.BigEndian.PutUint16(p[10:], 0)
	binary.BigEndian.PutUint16(p[10:], checksum(0, p[:20]))
	return p
}

// A peer cannot pass the access rules with fragments (issue 32): a later
// fragment nested in an atomic or first one, and first fragments without
// their whole TCP header, are dropped, counted as such and logged, with
// rules and without; a fragmented flow to an allowed port still crosses,
// and one to a denied port is denied.
func TestFragmentsJudged(t *testing.T) {
	g := newGrid(t, 2, nil)
	a, b := g.nodes[0], g.nodes[1]
	rules, err := ParseRules("allow * tcp/80; allow * icmp")
	if err != nil {
		t.Fatal(err)
	}
	b.net.SetRules(rules)
	// to port 22 once the kernel reassembles the inner datagram
	nested := ipv6(a.v6, b.v6, extFragment, cat(frag6(extFragment, 0, false), frag6(protoTCP, 8, false), make([]byte, 24)))
	nestedFirst := ipv6(a.v6, b.v6, extFragment, cat(frag6(extFragment, 0, true), frag6(protoTCP, 8, false), make([]byte, 24)))
	short6 := ipv6(a.v6, b.v6, extFragment, cat(frag6(protoTCP, 0, true), tcpHeader(40000, 80, tcpSYN)[:16]))
	short4 := frag4(a.v4, b.v4, protoTCP, 0, true, tcpHeader(40000, 80, tcpSYN)[:16])
	first6 := ipv6(a.v6, b.v6, extFragment, cat(frag6(protoTCP, 0, true), tcpHeader(40001, 80, tcpSYN), make([]byte, 36)))
	later6 := ipv6(a.v6, b.v6, extFragment, cat(frag6(protoTCP, 56, false), []byte("the rest of the segment")))
	first4 := frag4(a.v4, b.v4, protoTCP, 0, true, cat(tcpHeader(40002, 80, tcpACK), make([]byte, 4)))
	later4 := frag4(a.v4, b.v4, protoTCP, 24, false, []byte("the rest"))
	denied := ipv6(a.v6, b.v6, extFragment, cat(frag6(protoTCP, 0, true), tcpHeader(40003, 22, tcpSYN), make([]byte, 36)))

	a.send(t, nested, nestedFirst, short6, first6, later6)
	expect(t, b, first6, "an IPv6 first fragment to port 80")
	expect(t, b, later6, "its later fragment")
	a.send(t, short4, first4, later4)
	expect(t, b, first4, "an IPv4 first fragment to port 80")
	expect(t, b, later4, "its later fragment")
	a.send(t, denied)
	checkICMPv6(t, a.recv(t, "ICMPv6 prohibited about the fragment to port 22"), 1, 1, b.v6, a.v6, denied)

	b.net.SetRules(Rules{})
	ping := ipv6(a.v6, b.v6, protoICMPv6, []byte{128, 0, 0, 0, 0, 9, 0, 1})
	a.send(t, nested, first6, ping)
	expect(t, b, first6, "a first fragment, without rules")
	expect(t, b, ping, "the ping after a nested fragment, without rules")

	s := b.net.Stats()
	if s.Drops.BadFragment != 5 || s.Drops.Denied != 1 || s.Peer(a.id).Malformed != 5 {
		t.Errorf("b: drops %+v, peer a %+v; want 5 fragments that cannot be judged, 1 denied", s.Drops, s.Peer(a.id))
	}
	log := b.log.String()
	for _, want := range []string{dropBadFragment.String(), a.id.Short(), "a Fragment header behind another", "a first fragment with 16 bytes of its tcp header, of 20"} {
		if !strings.Contains(log, want) {
			t.Errorf("b's log does not say %q:\n%s", want, log)
		}
	}
}
