package wan

import (
	"encoding/binary"
	"errors"
)

// With IFF_VNET_HDR every packet read from or written to a TUN device is
// preceded by a struct virtio_net_hdr (legacy layout, host byte order).
const vnetHdrLen = 10

const (
	vnetNeedsCsum = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM

	gsoNone  = 0    // VIRTIO_NET_HDR_GSO_NONE
	gsoTCPv4 = 1    // VIRTIO_NET_HDR_GSO_TCPV4
	gsoECN   = 0x80 // VIRTIO_NET_HDR_GSO_ECN: the batch carries CWR
)

const (
	tcpFIN = 0x01
	tcpPSH = 0x08
	tcpCWR = 0x80
)

// vnetHdr is struct virtio_net_hdr.
type vnetHdr struct {
	flags      uint8
	gsoType    uint8
	hdrLen     uint16
	gsoSize    uint16
	csumStart  uint16
	csumOffset uint16
}

func decodeVnetHdr(b []byte) vnetHdr {
	e := binary.NativeEndian
	return vnetHdr{
		flags:      b[0],
		gsoType:    b[1],
		hdrLen:     e.Uint16(b[2:]),
		gsoSize:    e.Uint16(b[4:]),
		csumStart:  e.Uint16(b[6:]),
		csumOffset: e.Uint16(b[8:]),
	}
}

func (h vnetHdr) encode(b []byte) {
	e := binary.NativeEndian
	b[0] = h.flags
	b[1] = h.gsoType
	e.PutUint16(b[2:], h.hdrLen)
	e.PutUint16(b[4:], h.gsoSize)
	e.PutUint16(b[6:], h.csumStart)
	e.PutUint16(b[8:], h.csumOffset)
}

var errBadGSO = errors.New("malformed or unsupported GSO batch")

// tcp4Segmenter cuts an IPv4 TCP GSO batch (one header, up to 64 KiB of
// payload, as a TSO-capable device receives it) into the wire segments the
// kernel's own GSO would produce: payload in gsoSize pieces, IP total length
// and checksum and TCP sequence number per segment, IP ID counting up, FIN
// and PSH only on the last segment, CWR only on the first. Segments leave
// with a partial TCP checksum (VIRTIO_NET_HDR_F_NEEDS_CSUM and the
// pseudo-header sum in the checksum field), just as the batch came in.
type tcp4Segmenter struct {
	pkt    []byte
	ihl    int // IP header length
	hdrLen int // IP + TCP header length
	mss    int
	off    int // next payload byte to emit
	n      int // segments emitted so far
	seq    uint32
	id     uint16
	flags  byte
}

func newTCP4Segmenter(pkt []byte, h vnetHdr) (tcp4Segmenter, error) {
	var s tcp4Segmenter
	if h.gsoType&^gsoECN != gsoTCPv4 || h.gsoSize == 0 {
		return s, errBadGSO
	}
	if len(pkt) < 20 || pkt[0]>>4 != 4 || pkt[9] != 6 {
		return s, errBadGSO
	}
	ihl := int(pkt[0]&0x0f) * 4
	if ihl < 20 || len(pkt) < ihl+20 || binary.BigEndian.Uint16(pkt[6:8])&0x3fff != 0 {
		return s, errBadGSO // short, or a fragment
	}
	thl := int(pkt[ihl+12]>>4) * 4
	if thl < 20 || len(pkt) < ihl+thl {
		return s, errBadGSO
	}
	s = tcp4Segmenter{
		pkt:    pkt,
		ihl:    ihl,
		hdrLen: ihl + thl,
		mss:    int(h.gsoSize),
		seq:    binary.BigEndian.Uint32(pkt[ihl+4:]),
		id:     binary.BigEndian.Uint16(pkt[4:6]),
		flags:  pkt[ihl+13],
	}
	return s, nil
}

// wire returns how many segments the batch makes and their total size in
// bytes as they would appear on the wire (IP headers included).
func (s *tcp4Segmenter) wire() (segs, bytes int) {
	payload := len(s.pkt) - s.hdrLen
	segs = max((payload+s.mss-1)/s.mss, 1)
	return segs, payload + segs*s.hdrLen
}

// maxSegment is the largest buffer next can need.
func (s *tcp4Segmenter) maxSegment() int { return vnetHdrLen + s.hdrLen + s.mss }

// next writes the next segment, preceded by its virtio_net_hdr, into dst
// (which must hold maxSegment bytes) and returns its length including the
// header, or 0 once the whole batch has been emitted.
func (s *tcp4Segmenter) next(dst []byte) int {
	payload := s.pkt[s.hdrLen:]
	if s.off >= len(payload) && (s.n > 0 || len(payload) > 0) {
		return 0
	}
	end := min(s.off+s.mss, len(payload))
	seg := dst[vnetHdrLen:]
	copy(seg, s.pkt[:s.hdrLen])
	copy(seg[s.hdrLen:], payload[s.off:end])
	segLen := s.hdrLen + end - s.off

	be := binary.BigEndian
	be.PutUint16(seg[2:], uint16(segLen))
	be.PutUint16(seg[4:], s.id+uint16(s.n))
	seg[10], seg[11] = 0, 0
	be.PutUint16(seg[10:], ^checksum(seg[:s.ihl], 0))

	tcp := seg[s.ihl:]
	be.PutUint32(tcp[4:], s.seq+uint32(s.off))
	flags := s.flags
	if end < len(payload) {
		flags &^= tcpFIN | tcpPSH
	}
	if s.n > 0 {
		flags &^= tcpCWR
	}
	tcp[13] = flags
	pseudo := checksum(seg[12:20], uint32(6)+uint32(segLen-s.ihl))
	be.PutUint16(tcp[16:], pseudo)

	vnetHdr{
		flags:      vnetNeedsCsum,
		gsoType:    gsoNone,
		csumStart:  uint16(s.ihl),
		csumOffset: 16,
	}.encode(dst)

	s.off = end
	s.n++
	return vnetHdrLen + segLen
}

// checksum returns the folded 16-bit ones' complement sum of b plus
// initial (not complemented).
func checksum(b []byte, initial uint32) uint16 {
	sum := uint64(initial)
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		sum += v>>48 + v>>32&0xffff + v>>16&0xffff + v&0xffff
		b = b[8:]
	}
	for len(b) >= 2 {
		sum += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint64(b[0]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return uint16(sum)
}
