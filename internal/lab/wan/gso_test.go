package wan

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// gsoBatch builds an IPv4 TCP batch as a TSO device receives it: one
// 20-byte IP header, a 32-byte TCP header (timestamps) and payload bytes
// of data, with the pseudo-header sum in the TCP checksum field.
func gsoBatch(payload int, flags byte) []byte {
	const ihl, thl = 20, 32
	pkt := make([]byte, ihl+thl+payload)
	be := binary.BigEndian
	pkt[0] = 0x45
	be.PutUint16(pkt[2:], uint16(len(pkt)))
	be.PutUint16(pkt[4:], 0xfffe) // IP ID about to wrap
	be.PutUint16(pkt[6:], 0x4000) // DF
	pkt[8] = 64
	pkt[9] = 6
	copy(pkt[12:], []byte{198, 51, 100, 1, 198, 51, 100, 2})
	be.PutUint16(pkt[10:], ^checksum(pkt[:ihl], 0))
	tcp := pkt[ihl:]
	be.PutUint16(tcp[0:], 40000)
	be.PutUint16(tcp[2:], 5201)
	be.PutUint32(tcp[4:], 0xffffff00) // sequence about to wrap
	be.PutUint32(tcp[8:], 77)
	tcp[12] = thl / 4 << 4
	tcp[13] = flags
	be.PutUint16(tcp[14:], 512)
	copy(tcp[20:], []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2})
	for i := range payload {
		tcp[thl+i] = byte(i * 31)
	}
	be.PutUint16(tcp[16:], checksum(pkt[12:20], 6+uint32(len(tcp))))
	return pkt
}

func TestSegmentTCP4(t *testing.T) {
	const mss, payload = 1448, 5000
	const ack = 0x10
	batch := gsoBatch(payload, tcpCWR|ack|tcpPSH|tcpFIN)
	h := vnetHdr{flags: vnetNeedsCsum, gsoType: gsoTCPv4 | gsoECN, hdrLen: 52, gsoSize: mss, csumStart: 20, csumOffset: 16}
	s, err := newTCP4Segmenter(batch, h)
	if err != nil {
		t.Fatal(err)
	}
	segs, wire := s.wire()
	if segs != 4 || wire != payload+4*52 {
		t.Fatalf("wire() = %d segments %d bytes, want 4 and %d", segs, wire, payload+4*52)
	}
	buf := make([]byte, s.maxSegment())
	be := binary.BigEndian
	var got []byte
	for i := 0; ; i++ {
		n := s.next(buf)
		if n == 0 {
			if i != segs {
				t.Fatalf("emitted %d segments, want %d", i, segs)
			}
			break
		}
		vh := decodeVnetHdr(buf)
		if vh.flags != vnetNeedsCsum || vh.gsoType != gsoNone || vh.csumStart != 20 || vh.csumOffset != 16 {
			t.Errorf("segment %d: vnet header %+v", i, vh)
		}
		seg := buf[vnetHdrLen:n]
		want := min(mss, payload-i*mss)
		if len(seg) != 52+want || int(be.Uint16(seg[2:])) != len(seg) {
			t.Errorf("segment %d: %d bytes, IP total length %d, want %d", i, len(seg), be.Uint16(seg[2:]), 52+want)
		}
		if id := be.Uint16(seg[4:]); id != uint16(0xfffe+i) {
			t.Errorf("segment %d: IP ID %#x", i, id)
		}
		if checksum(seg[:20], 0) != 0xffff {
			t.Errorf("segment %d: bad IP checksum", i)
		}
		tcp := seg[20:]
		if seq := be.Uint32(tcp[4:]); seq != 0xffffff00+uint32(i*mss) {
			t.Errorf("segment %d: seq %#x", i, seq)
		}
		last := i == segs-1
		wantFlags := byte(ack)
		if i == 0 {
			wantFlags |= tcpCWR
		}
		if last {
			wantFlags |= tcpPSH | tcpFIN
		}
		if tcp[13] != wantFlags {
			t.Errorf("segment %d: flags %#x, want %#x", i, tcp[13], wantFlags)
		}
		// Complete the partial checksum as the kernel would, then check
		// it the way a receiver does.
		full := append([]byte(nil), tcp...)
		be.PutUint16(full[16:], ^checksum(full, 0))
		pseudo := checksum(seg[12:20], 6+uint32(len(full)))
		if checksum(full, uint32(pseudo)) != 0xffff {
			t.Errorf("segment %d: TCP checksum does not verify", i)
		}
		if !bytes.Equal(tcp[0:4], batch[20:24]) || !bytes.Equal(tcp[8:13], batch[28:33]) ||
			!bytes.Equal(tcp[14:16], batch[34:36]) || !bytes.Equal(tcp[18:32], batch[38:52]) {
			t.Errorf("segment %d: ports, ack, offset, window or options changed", i)
		}
		got = append(got, tcp[32:]...)
	}
	if !bytes.Equal(got, batch[52:]) {
		t.Error("segments' payload differs from the batch's")
	}
}

func TestSegmentTCP4Rejects(t *testing.T) {
	h := vnetHdr{gsoType: gsoTCPv4, gsoSize: 1448}
	frag := gsoBatch(3000, 0x10)
	binary.BigEndian.PutUint16(frag[6:], 0x2000) // MF
	udp := gsoBatch(3000, 0x10)
	udp[9] = 17
	for name, tc := range map[string]struct {
		pkt []byte
		h   vnetHdr
	}{
		"fragment":  {frag, h},
		"not TCP":   {udp, h},
		"short":     {gsoBatch(0, 0x10)[:30], h},
		"UDP GSO":   {gsoBatch(3000, 0x10), vnetHdr{gsoType: 5, gsoSize: 1448}},
		"zero size": {gsoBatch(3000, 0x10), vnetHdr{gsoType: gsoTCPv4}},
	} {
		if _, err := newTCP4Segmenter(tc.pkt, tc.h); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestVnetHdrRoundTrip(t *testing.T) {
	h := vnetHdr{flags: 1, gsoType: 0x81, hdrLen: 66, gsoSize: 1448, csumStart: 34, csumOffset: 16}
	b := make([]byte, vnetHdrLen)
	h.encode(b)
	if got := decodeVnetHdr(b); got != h {
		t.Errorf("round trip: %+v, want %+v", got, h)
	}
}

func BenchmarkSegmentTCP4(b *testing.B) {
	batch := gsoBatch(65000, 0x18)
	h := vnetHdr{flags: vnetNeedsCsum, gsoType: gsoTCPv4, gsoSize: 1448, csumStart: 20, csumOffset: 16}
	buf := make([]byte, 2048)
	b.SetBytes(int64(len(batch)))
	for b.Loop() {
		s, _ := newTCP4Segmenter(batch, h)
		for s.next(buf) > 0 {
		}
	}
}
