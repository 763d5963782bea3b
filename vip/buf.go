package vip

import (
	"encoding/binary"
	"sync"

	"github.com/gridlink/gridlink/tun"
)

// Packets on their way to a peer live in buffers with headroom (pbuf),
// so that the sender frames them in place: the device is read at
// tun.Offset, and the frame's length goes in the two bytes before the
// packet. A large packet keeps the very buffer the device was read into
// (the reader takes a fresh one from bigPool); a small one is copied
// into a small pooled buffer (a copy costs less than a large buffer held
// by a queue). Buffers go back to their pool once written to the
// connection or dropped.

// smallPacket is the largest packet copied into a small buffer.
const smallPacket = 2048

// pbuf is a packet in a buffer with headroom: the packet at
// b[tun.Offset:tun.Offset+n], its frame at b[tun.Offset-frameHeader:].
type pbuf struct {
	b    []byte
	n    int
	flow uint64 // its flow's hash (carrier.go); 0: none (the main connection)
	tcp  bool   // a TCP segment: kept after its write to be written again (replay.go)
}

func (p *pbuf) pkt() []byte { return p.b[tun.Offset : tun.Offset+p.n] }

// frame writes the frame's length in the headroom and returns the frame
// (frame.go): the length and the packet, in place.
func (p *pbuf) frame() []byte {
	f := p.b[tun.Offset-frameHeader : tun.Offset+p.n]
	binary.BigEndian.PutUint16(f, uint16(p.n))
	return f
}

var (
	smallPool = sync.Pool{New: func() any { return &pbuf{b: make([]byte, tun.Offset+smallPacket)} }}
	bigPool   sync.Pool // *pbuf of any size above small
)

// bigBuf returns a buffer of size bytes at least.
func bigBuf(size int) *pbuf {
	if v := bigPool.Get(); v != nil {
		if p := v.(*pbuf); len(p.b) >= size {
			return p
		}
	}
	return &pbuf{b: make([]byte, size)}
}

// copyPacket copies pkt into a buffer of its own.
func copyPacket(pkt []byte) *pbuf {
	var p *pbuf
	if len(pkt) <= smallPacket {
		p = smallPool.Get().(*pbuf)
	} else {
		p = bigBuf(tun.Offset + len(pkt))
	}
	p.n = copy(p.b[tun.Offset:], pkt)
	p.flow, p.tcp = 0, false
	return p
}

// own returns the packet of the device's read buffer p to keep past the
// read: p itself when the packet is large (the reader then reads into a
// fresh buffer), a copy when small.
func own(p *pbuf) *pbuf {
	if p.n <= smallPacket {
		q := copyPacket(p.pkt())
		q.flow, q.tcp = p.flow, p.tcp
		return q
	}
	return p
}

// release gives p back to its pool; the caller holds no reference to it
// any more.
func (p *pbuf) release() {
	p.n, p.flow, p.tcp = 0, 0, false
	if len(p.b) == tun.Offset+smallPacket {
		smallPool.Put(p)
	} else if len(p.b) > tun.Offset+smallPacket {
		bigPool.Put(p)
	}
}
