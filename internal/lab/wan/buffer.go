package wan

import (
	"sync"

	"github.com/gridlink/gridlink/tun"
)

// Packet buffers come in two sizes: small ones for wire-sized packets (the
// device cuts offload batches into those on Read) and large ones for
// devices with an MTU past a small buffer and for the packets a pipe
// writes in one batch, which the device coalesces on Write (GRO). Every
// packet sits at tun.Offset in its buffer.
const (
	smallBufSize = 2048
	largeBufSize = tun.Offset + tun.MaxPacket
)

type buffer struct {
	b []byte
}

var (
	smallPool = sync.Pool{New: func() any { return &buffer{b: make([]byte, smallBufSize)} }}
	largePool = sync.Pool{New: func() any { return &buffer{b: make([]byte, largeBufSize)} }}
)

// getBuffer returns a buffer that holds at least n bytes.
func getBuffer(n int) *buffer {
	if n <= smallBufSize {
		return smallPool.Get().(*buffer)
	}
	if n <= largeBufSize {
		return largePool.Get().(*buffer)
	}
	return &buffer{b: make([]byte, n)}
}

func putBuffer(b *buffer) {
	switch len(b.b) {
	case smallBufSize:
		smallPool.Put(b)
	case largeBufSize:
		largePool.Put(b)
	}
}
