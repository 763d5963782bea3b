package hub

import "sync"

// chunkSize is the unit of circuit receive buffers.
const chunkSize = 32 << 10

type chunk = [chunkSize]byte

var chunkPool = sync.Pool{New: func() any { return new(chunk) }}

// chunkBuf is a FIFO of bytes in pooled chunks: it holds what a circuit
// received and its application has not read yet, and nothing when empty.
type chunkBuf struct {
	chunks []*chunk
	r      int // read offset in chunks[0]
	w      int // write offset in the last chunk
	n      int // bytes held
}

func (b *chunkBuf) Len() int { return b.n }

// Write appends p.
func (b *chunkBuf) Write(p []byte) {
	for len(p) > 0 {
		if len(b.chunks) == 0 || b.w == chunkSize {
			b.chunks = append(b.chunks, chunkPool.Get().(*chunk))
			b.w = 0
		}
		k := copy(b.chunks[len(b.chunks)-1][b.w:], p)
		b.w += k
		b.n += k
		p = p[k:]
	}
}

// Read takes up to len(p) bytes.
func (b *chunkBuf) Read(p []byte) int {
	n := 0
	for len(p) > 0 && b.n > 0 {
		end := chunkSize
		if len(b.chunks) == 1 {
			end = b.w
		}
		k := copy(p, b.chunks[0][b.r:end])
		b.r += k
		b.n -= k
		n += k
		p = p[k:]
		if b.r == end {
			b.drop()
		}
	}
	return n
}

// drop releases the first chunk, fully read.
func (b *chunkBuf) drop() {
	chunkPool.Put(b.chunks[0])
	b.chunks[0] = nil
	b.chunks = b.chunks[1:]
	b.r = 0
	if len(b.chunks) == 0 {
		b.chunks, b.w = nil, 0
	}
}

// Reset releases everything.
func (b *chunkBuf) Reset() {
	for _, c := range b.chunks {
		chunkPool.Put(c)
	}
	*b = chunkBuf{}
}
