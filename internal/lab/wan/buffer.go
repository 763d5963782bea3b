package wan

import "sync"

// Packet buffers come in two sizes: small ones for wire-sized packets and
// large ones for reads (which may return a 64 KiB GSO batch). A reader keeps
// one large buffer for reading and copies wire-sized packets into small
// buffers, so a delay line full of 1500-byte packets does not pin 64 KiB per
// packet; only GSO batches travel in large buffers.
const (
	smallBufSize = 2048
	largeBufSize = vnetHdrLen + 65535 + 1024 // headroom over the largest batch the kernel hands out
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
