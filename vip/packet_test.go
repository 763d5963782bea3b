package vip

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

// ipv4 builds an IPv4 packet from src to dst with protocol proto and
// payload (a UDP-like payload: the path never reads it).
func ipv4(src, dst netip.Addr, proto byte, payload []byte) []byte {
	p := make([]byte, 20+len(payload))
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	p[6] = 0x40 // DF
	p[8] = 64
	p[9] = proto
	s, d := src.As4(), dst.As4()
	copy(p[12:], s[:])
	copy(p[16:], d[:])
	binary.BigEndian.PutUint16(p[10:], checksum(0, p[:20]))
	copy(p[20:], payload)
	return p
}

// ipv6 builds an IPv6 packet.
func ipv6(src, dst netip.Addr, next byte, payload []byte) []byte {
	p := make([]byte, 40+len(payload))
	p[0] = 0x60
	binary.BigEndian.PutUint16(p[4:], uint16(len(payload)))
	p[6] = next
	p[7] = 64
	s, d := src.As16(), dst.As16()
	copy(p[8:], s[:])
	copy(p[24:], d[:])
	copy(p[40:], payload)
	return p
}

var (
	a4 = netip.MustParseAddr("100.96.0.1")
	b4 = netip.MustParseAddr("100.96.0.2")
	a6 = netip.MustParseAddr("fd67:726c::1")
	b6 = netip.MustParseAddr("fd67:726c::2")
)

func TestParse(t *testing.T) {
	h, err := Parse(ipv4(a4, b4, 17, make([]byte, 30)))
	if err != nil || h.Version != 4 || h.HeaderLen != 20 || h.TotalLen != 50 || h.Protocol != 17 || h.Src != a4 || h.Dst != b4 || !h.DontFragment || h.FragOffset != 0 {
		t.Errorf("IPv4: %+v, %v", h, err)
	}
	h, err = Parse(ipv6(a6, b6, 6, make([]byte, 30)))
	if err != nil || h.Version != 6 || h.HeaderLen != 40 || h.TotalLen != 70 || h.Protocol != 6 || h.Src != a6 || h.Dst != b6 {
		t.Errorf("IPv6: %+v, %v", h, err)
	}
	opts := ipv4(a4, b4, 17, make([]byte, 12))
	opts[0] = 0x48 // 32-byte header: 12 bytes of options
	if h, err := Parse(opts); err != nil || h.HeaderLen != 32 {
		t.Errorf("IPv4 with options: %+v, %v", h, err)
	}
}

func TestParseRefusesLies(t *testing.T) {
	good4 := ipv4(a4, b4, 17, make([]byte, 30))
	good6 := ipv6(a6, b6, 17, make([]byte, 30))
	edit := func(p []byte, f func([]byte)) []byte {
		p = append([]byte(nil), p...)
		f(p)
		return p
	}
	for _, tc := range []struct {
		name string
		pkt  []byte
		want Problem
	}{
		{"empty", nil, ProblemEmpty},
		{"version 5", edit(good4, func(p []byte) { p[0] = 0x55 }), ProblemVersion},
		{"IPv4 of 19 bytes", good4[:19], ProblemShort},
		{"IHL 4", edit(good4, func(p []byte) { p[0] = 0x44 }), ProblemHeaderLen},
		{"IHL beyond the packet", edit(good4[:20], func(p []byte) { p[0] = 0x46; binary.BigEndian.PutUint16(p[2:], 20) }), ProblemHeaderLen},
		{"total length longer", edit(good4, func(p []byte) { binary.BigEndian.PutUint16(p[2:], 51) }), ProblemTotalLen},
		{"total length shorter", edit(good4, func(p []byte) { binary.BigEndian.PutUint16(p[2:], 49) }), ProblemTotalLen},
		{"total length below header", edit(good4, func(p []byte) { binary.BigEndian.PutUint16(p[2:], 10) }), ProblemTotalLen},
		{"IPv6 of 39 bytes", good6[:39], ProblemShort},
		{"payload length longer", edit(good6, func(p []byte) { binary.BigEndian.PutUint16(p[4:], 31) }), ProblemPayloadLen},
		{"payload length shorter", edit(good6, func(p []byte) { binary.BigEndian.PutUint16(p[4:], 29) }), ProblemPayloadLen},
		{"jumbogram", edit(good6, func(p []byte) { binary.BigEndian.PutUint16(p[4:], 0) }), ProblemPayloadLen},
	} {
		_, err := Parse(tc.pkt)
		var pe *PacketError
		if !errors.Is(err, ErrMalformed) || !errors.As(err, &pe) || pe.Problem != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(ipv4(a4, b4, 17, make([]byte, 30)))
	f.Add(ipv6(a6, b6, 58, []byte{128, 0, 0, 0}))
	f.Add([]byte{0x45, 0, 0, 20})
	f.Add([]byte{0x4f})
	f.Add([]byte{0x60})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		h, err := Parse(pkt)
		if err != nil {
			var pe *PacketError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a PacketError", err)
			}
			return
		}
		if h.TotalLen != len(pkt) || h.HeaderLen > len(pkt) || (h.Version != 4 && h.Version != 6) {
			t.Fatalf("accepted %x as %+v", pkt, h)
		}
		// The ICMP errors built about any accepted packet are well formed.
		for _, m := range [][]byte{icmpTooBig(h, pkt, 1280), icmpUnreachable(h, pkt)} {
			if m == nil {
				continue
			}
			if _, err := Parse(m); err != nil {
				t.Fatalf("ICMP error about %x: %v", pkt, err)
			}
			if len(m) > ipv6MinMTU {
				t.Fatalf("ICMP error of %d bytes", len(m))
			}
		}
	})
}
