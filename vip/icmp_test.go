package vip

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// verifies reports whether the ones'-complement sum of the 16-bit words
// of the parts (the checksum field included) is all ones (RFC 1071 4.1).
func verifies(parts ...[]byte) bool {
	var s uint64
	var all []byte
	for _, p := range parts {
		all = append(all, p...)
	}
	if len(all)%2 == 1 {
		all = append(all, 0)
	}
	for i := 0; i < len(all); i += 2 {
		s += uint64(all[i])<<8 | uint64(all[i+1])
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return s == 0xffff
}

// checkICMPv4 checks m is an ICMPv4 error of type and code from src to
// dst quoting orig's header and 8 bytes, with checksums right, and
// returns its bytes 4-7.
func checkICMPv4(t *testing.T, m []byte, typ, code byte, src, dst netip.Addr, orig []byte) uint32 {
	t.Helper()
	h, err := Parse(m)
	if err != nil || h.Version != 4 || h.Protocol != protoICMPv4 || h.Src != src || h.Dst != dst {
		t.Fatalf("ICMPv4 error: %+v, %v; want from %s to %s", h, err, src, dst)
	}
	if !verifies(m[:h.HeaderLen]) {
		t.Errorf("IPv4 header checksum wrong")
	}
	icmp := m[h.HeaderLen:]
	if icmp[0] != typ || icmp[1] != code {
		t.Errorf("ICMPv4 type %d code %d, want %d %d", icmp[0], icmp[1], typ, code)
	}
	if !verifies(icmp) {
		t.Errorf("ICMPv4 checksum wrong")
	}
	oh, _ := Parse(orig)
	if want := orig[:oh.HeaderLen+8]; string(icmp[8:]) != string(want) {
		t.Errorf("ICMPv4 quotes %x, want the header and 8 bytes %x", icmp[8:], want)
	}
	return binary.BigEndian.Uint32(icmp[4:8])
}

// checkICMPv6 checks m is an ICMPv6 error of type and code from src to
// dst quoting as much of orig as fits 1280 bytes, checksum right, and
// returns its bytes 4-7.
func checkICMPv6(t *testing.T, m []byte, typ, code byte, src, dst netip.Addr, orig []byte) uint32 {
	t.Helper()
	h, err := Parse(m)
	if err != nil || h.Version != 6 || h.Protocol != protoICMPv6 || h.Src != src || h.Dst != dst {
		t.Fatalf("ICMPv6 error: %+v, %v; want from %s to %s", h, err, src, dst)
	}
	if len(m) > 1280 {
		t.Errorf("ICMPv6 error of %d bytes exceeds the minimum MTU", len(m))
	}
	icmp := m[40:]
	if icmp[0] != typ || icmp[1] != code {
		t.Errorf("ICMPv6 type %d code %d, want %d %d", icmp[0], icmp[1], typ, code)
	}
	pseudo := make([]byte, 40)
	copy(pseudo, m[8:40])
	binary.BigEndian.PutUint32(pseudo[32:], uint32(len(icmp)))
	pseudo[39] = 58
	if !verifies(pseudo, icmp) {
		t.Errorf("ICMPv6 checksum wrong")
	}
	if want := orig[:min(len(orig), 1280-48)]; string(icmp[8:]) != string(want) {
		t.Errorf("ICMPv6 quotes %d bytes, want %d of the packet", len(icmp)-8, len(want))
	}
	return binary.BigEndian.Uint32(icmp[4:8])
}

func TestICMPErrors(t *testing.T) {
	p4 := ipv4(a4, b4, 17, make([]byte, 1400))
	h, _ := Parse(p4)
	if mtu := checkICMPv4(t, icmpTooBig(h, p4, 1280), 3, 4, b4, a4, p4); mtu != 1280 {
		t.Errorf("fragmentation needed says MTU %d, want 1280", mtu)
	}
	checkICMPv4(t, icmpUnreachable(h, p4), 3, 1, b4, a4, p4)

	odd := ipv4(a4, b4, 17, make([]byte, 3)) // shorter than header + 8, odd length
	h, _ = Parse(odd)
	m := icmpUnreachable(h, odd)
	if !verifies(m[20:]) || string(m[28:]) != string(odd) {
		t.Errorf("ICMPv4 about a 23-byte packet: %x", m)
	}

	p6 := ipv6(a6, b6, 17, make([]byte, 1400))
	h, _ = Parse(p6)
	if mtu := checkICMPv6(t, icmpTooBig(h, p6, 1280), 2, 0, b6, a6, p6); mtu != 1280 {
		t.Errorf("packet too big says MTU %d, want 1280", mtu)
	}
	checkICMPv6(t, icmpUnreachable(h, p6), 1, 3, b6, a6, p6)

	// No error about an error, a non-first fragment, or to a multicast group.
	for name, pkt := range map[string][]byte{
		"ICMPv4 error":      ipv4(a4, b4, 1, []byte{3, 4, 0, 0, 0, 0, 5, 0}),
		"ICMPv6 error":      ipv6(a6, b6, 58, []byte{2, 0, 0, 0, 0, 0, 5, 0}),
		"later fragment":    func() []byte { p := ipv4(a4, b4, 17, make([]byte, 8)); p[7] = 1; return p }(),
		"to multicast":      ipv4(a4, netip.MustParseAddr("224.0.0.1"), 17, nil),
		"from unspecified6": ipv6(netip.IPv6Unspecified(), b6, 17, nil),
	} {
		h, err := Parse(pkt)
		if err != nil {
			t.Fatal(name, err)
		}
		if m := icmpTooBig(h, pkt, 1280); m != nil {
			t.Errorf("%s: an ICMP error about it", name)
		}
	}
	// An echo request does get one.
	echo := ipv4(a4, b4, 1, []byte{8, 0, 0, 0, 0, 0, 0, 0})
	if h, _ := Parse(echo); icmpUnreachable(h, echo) == nil {
		t.Errorf("no ICMP error about an echo request")
	}
}
