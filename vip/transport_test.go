package vip

import (
	"encoding/binary"
	"errors"
	"testing"
)

// ext is an IPv6 extension header of the given type, next header and
// total size (a multiple of 8; fragment: 8, fragOff its offset in bytes).
func ext(typ, next byte, size int, fragOff int) []byte {
	b := make([]byte, size)
	b[0] = next
	switch typ {
	case extFragment:
		binary.BigEndian.PutUint16(b[2:], uint16(fragOff/8)<<3)
	case extAuth:
		b[1] = byte(size/4 - 2)
	default:
		b[1] = byte(size/8 - 1)
	}
	return b
}

func tcpHeader(src, dst uint16, flags byte) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b, src)
	binary.BigEndian.PutUint16(b[2:], dst)
	b[12] = 5 << 4
	b[13] = flags
	return b
}

func udpHeader(src, dst uint16, payload int) []byte {
	b := make([]byte, 8+payload)
	binary.BigEndian.PutUint16(b, src)
	binary.BigEndian.PutUint16(b[2:], dst)
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)))
	return b
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestTransportOf(t *testing.T) {
	packetTooBig := []byte{2, 0, 0, 0, 0, 0, 5, 0}
	for _, c := range []struct {
		name      string
		pkt       []byte
		want      transport
		err       bool
		fragErr   bool // a FragmentError (fragment.go)
		icmpError bool
	}{
		{name: "IPv4 TCP SYN", pkt: ipv4(a4, b4, protoTCP, tcpHeader(40000, 22, tcpSYN)),
			want: transport{proto: protoTCP, off: 20, ports: true, srcPort: 40000, dstPort: 22, flags: tcpSYN}},
		{name: "IPv4 UDP", pkt: ipv4(a4, b4, protoUDP, udpHeader(5353, 53, 4)),
			want: transport{proto: protoUDP, off: 20, ports: true, srcPort: 5353, dstPort: 53}},
		{name: "IPv4 echo", pkt: ipv4(a4, b4, protoICMPv4, []byte{8, 0, 0, 0, 0x12, 0x34, 0, 1}),
			want: transport{proto: protoICMPv4, off: 20, icmp: true, icmpType: 8, echoID: 0x1234}},
		{name: "IPv4 later fragment", pkt: func() []byte { p := ipv4(a4, b4, protoTCP, make([]byte, 8)); p[7] = 1; return p }(),
			want: transport{proto: protoTCP, off: 20, fragment: true}},
		{name: "IPv4 TCP cut short", pkt: ipv4(a4, b4, protoTCP, make([]byte, 10)), err: true},
		{name: "IPv6 UDP behind hop-by-hop, routing and destination options",
			pkt:  ipv6(a6, b6, extHopByHop, cat(ext(extHopByHop, extRouting, 8, 0), ext(extRouting, extDestOpts, 24, 0), ext(extDestOpts, protoUDP, 16, 0), udpHeader(1, 2, 0))),
			want: transport{proto: protoUDP, off: 40 + 48, ports: true, srcPort: 1, dstPort: 2}},
		{name: "IPv6 first fragment of TCP", pkt: ipv6(a6, b6, extFragment, cat(ext(extFragment, protoTCP, 8, 0), tcpHeader(1000, 443, tcpSYN|tcpACK))),
			want: transport{proto: protoTCP, off: 48, ports: true, srcPort: 1000, dstPort: 443, flags: tcpSYN | tcpACK}},
		{name: "IPv6 later fragment", pkt: ipv6(a6, b6, extFragment, cat(ext(extFragment, protoTCP, 8, 1232), make([]byte, 30))),
			want: transport{proto: protoTCP, off: 48, fragment: true}},
		{name: "ICMPv6 error behind destination options and authentication", pkt: ipv6(a6, b6, extDestOpts, cat(ext(extDestOpts, extAuth, 8, 0), ext(extAuth, protoICMPv6, 16, 0), packetTooBig)),
			want: transport{proto: protoICMPv6, off: 64, icmp: true, icmpType: 2}, icmpError: true},
		{name: "ICMPv6 echo reply", pkt: ipv6(a6, b6, protoICMPv6, []byte{129, 0, 0, 0, 0, 7, 0, 1}),
			want: transport{proto: protoICMPv6, off: 40, icmp: true, icmpType: 129, echoID: 7}},
		{name: "ESP ends the walk", pkt: ipv6(a6, b6, extHopByHop, cat(ext(extHopByHop, extESP, 8, 0), make([]byte, 20))),
			want: transport{proto: extESP, off: 48}},
		{name: "extension header beyond the packet", pkt: ipv6(a6, b6, extRouting, ext(extRouting, protoUDP, 8, 0)[:6]), err: true},
		{name: "extension header length beyond the packet", pkt: ipv6(a6, b6, extRouting, cat([]byte{protoUDP, 4}, make([]byte, 14))), err: true},
		{name: "too many extension headers", pkt: ipv6(a6, b6, extDestOpts, cat(
			ext(extDestOpts, extDestOpts, 8, 0), ext(extDestOpts, extDestOpts, 8, 0), ext(extDestOpts, extDestOpts, 8, 0),
			ext(extDestOpts, extDestOpts, 8, 0), ext(extDestOpts, extDestOpts, 8, 0), ext(extDestOpts, extDestOpts, 8, 0),
			ext(extDestOpts, extDestOpts, 8, 0), ext(extDestOpts, extDestOpts, 8, 0), ext(extDestOpts, protoUDP, 8, 0), udpHeader(1, 2, 0))), err: true},
		// What a fragment may carry (fragment.go): a Fragment header behind
		// another, and a first fragment without its whole transport header,
		// are refused; atomic fragments, first fragments that hold it and
		// later fragments are read as before, the walk ending at a later
		// fragment's Fragment header.
		{name: "IPv6 later fragment nested in an atomic one", pkt: ipv6(a6, b6, extFragment, cat(frag6(extFragment, 0, false), frag6(protoTCP, 8, false), make([]byte, 24))), fragErr: true},
		{name: "IPv6 later fragment nested in a first one", pkt: ipv6(a6, b6, extFragment, cat(frag6(extFragment, 0, true), frag6(protoTCP, 8, false), make([]byte, 24))), fragErr: true},
		{name: "IPv6 Fragment header behind destination options and another", pkt: ipv6(a6, b6, extFragment, cat(frag6(extDestOpts, 0, false), ext(extDestOpts, extFragment, 8, 0), frag6(protoTCP, 0, false), tcpHeader(1, 80, tcpSYN))), fragErr: true},
		{name: "IPv6 first fragment with 16 bytes of TCP", pkt: ipv6(a6, b6, extFragment, cat(frag6(protoTCP, 0, true), tcpHeader(1, 80, tcpSYN)[:16])), fragErr: true},
		{name: "IPv6 first fragment with 4 bytes of UDP", pkt: ipv6(a6, b6, extFragment, cat(frag6(protoUDP, 0, true), udpHeader(1, 53, 0)[:4], make([]byte, 4))[:12]), fragErr: true},
		{name: "IPv6 first fragment whose header chain goes on in the next", pkt: ipv6(a6, b6, extFragment, cat(frag6(extDestOpts, 0, true), []byte{protoTCP, 2})), fragErr: true},
		{name: "IPv4 first fragment with 16 bytes of TCP", pkt: frag4(a4, b4, protoTCP, 0, true, tcpHeader(1, 80, tcpSYN)[:16]), fragErr: true},
		{name: "IPv6 first fragment of TCP, whole", pkt: ipv6(a6, b6, extFragment, cat(frag6(protoTCP, 0, true), tcpHeader(1000, 80, tcpSYN), make([]byte, 16))),
			want: transport{proto: protoTCP, off: 48, ports: true, srcPort: 1000, dstPort: 80, flags: tcpSYN}},
		{name: "IPv6 atomic fragment with 16 bytes of TCP (a whole packet, cut short as before)", pkt: ipv6(a6, b6, extFragment, cat(frag6(protoTCP, 0, false), tcpHeader(1000, 80, tcpSYN)[:16])),
			want: transport{proto: protoTCP, off: 48, ports: true, srcPort: 1000, dstPort: 80, flags: tcpSYN}},
		{name: "IPv6 later fragment whose data reads as a Fragment header", pkt: ipv6(a6, b6, extFragment, cat(frag6(extFragment, 1232, false), frag6(protoTCP, 0, true), make([]byte, 16))),
			want: transport{proto: extFragment, off: 48, fragment: true}},
		{name: "IPv4 first fragment of TCP, whole", pkt: frag4(a4, b4, protoTCP, 0, true, cat(tcpHeader(1000, 80, tcpACK), make([]byte, 4))),
			want: transport{proto: protoTCP, off: 20, ports: true, srcPort: 1000, dstPort: 80, flags: tcpACK}},
		{name: "IPv4 later fragment", pkt: frag4(a4, b4, protoTCP, 24, false, make([]byte, 8)),
			want: transport{proto: protoTCP, off: 20, fragment: true}},
	} {
		h, err := Parse(c.pkt)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, err := transportOf(h, c.pkt)
		if c.fragErr {
			var fe *FragmentError
			if !errors.As(err, &fe) || !errors.Is(err, ErrBadFragment) || !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: %+v, %v; want a FragmentError", c.name, got, err)
			}
			continue
		}
		if c.err {
			var te *TransportError
			if !errors.As(err, &te) || !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: %+v, %v; want a TransportError", c.name, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
		if isICMPError(h, c.pkt) != c.icmpError {
			t.Errorf("%s: taken for an ICMP error: %v", c.name, !c.icmpError)
		}
		if due := icmpDue(h, c.pkt); due == (c.icmpError || c.want.fragment) {
			t.Errorf("%s: an ICMP error about it due: %v", c.name, due)
		}
	}
}

func FuzzTransport(f *testing.F) {
	f.Add(ipv4(a4, b4, protoTCP, tcpHeader(40000, 22, tcpSYN)))
	f.Add(ipv6(a6, b6, extHopByHop, cat(ext(extHopByHop, extFragment, 8, 0), ext(extFragment, protoICMPv6, 8, 0), []byte{1, 4, 0, 0, 0, 0, 0, 0})))
	f.Add(ipv6(a6, b6, extAuth, cat(ext(extAuth, protoUDP, 12, 0), udpHeader(1, 2, 3))))
	f.Add(ipv6(a6, b6, extRouting, []byte{extRouting, 255}))
	f.Add(ipv6(a6, b6, extFragment, cat(frag6(extFragment, 0, false), frag6(protoTCP, 8, false), make([]byte, 24)))) // fragment.go
	f.Add(ipv6(a6, b6, extFragment, cat(frag6(protoTCP, 0, true), tcpHeader(1, 80, tcpSYN)[:16])))
	f.Add(frag4(a4, b4, protoTCP, 0, true, tcpHeader(1, 80, tcpSYN)[:16]))
	f.Fuzz(func(t *testing.T, pkt []byte) {
		h, err := Parse(pkt)
		if err != nil {
			return
		}
		tr, err := transportOf(h, pkt)
		if err != nil {
			var te *TransportError
			var fe *FragmentError
			if !errors.As(err, &te) && !errors.As(err, &fe) {
				t.Fatalf("error %v is neither a TransportError nor a FragmentError", err)
			}
			return
		}
		if tr.off > len(pkt) || tr.off < h.HeaderLen || (tr.ports && tr.icmp) || (tr.fragment && (tr.ports || tr.icmp)) {
			t.Fatalf("%x read as %+v", pkt, tr)
		}
		if tr.isICMPError() && icmpDue(h, pkt) {
			t.Fatalf("an ICMP error about the ICMP error %x", pkt)
		}
		for _, m := range [][]byte{icmpProhibited(h, pkt), icmpTooBig(h, pkt, 1280)} {
			if m == nil {
				continue
			}
			mh, err := Parse(m)
			if err != nil {
				t.Fatalf("ICMP error about %x: %v", pkt, err)
			}
			if !isICMPError(mh, m) {
				t.Fatalf("the ICMP error about %x is not one: %x", pkt, m)
			}
			q, ok := quotedOf(mh.Version, m[mh.HeaderLen+icmpHeader:])
			if !ok || q.dst != h.Dst || q.proto != h.Protocol || (tr.ports && !tr.fragment && h.Version == 4 && q.dstPort != tr.dstPort) {
				t.Fatalf("the quote of the ICMP error about %x reads as %+v", pkt, q)
			}
		}
		quotedOf(h.Version, pkt) // any bytes: no panic
		quotedOf(h.Version, pkt[h.HeaderLen:])
	})
}
