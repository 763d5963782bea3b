package hub

import (
	"sync"

	"github.com/gridlink/gridlink/wire"
)

// chunkSize is the unit of circuit receive buffers.
const chunkSize = 32 << 10

type chunk = [chunkSize]byte

var chunkPool = sync.Pool{New: func() any { return new(chunk) }}

// chunkBuf is a FIFO of bytes in pieces: pooled chunks that small
// payloads are copied into, and large payloads as they were read
// (wire.Frame.Keep), which saves the receive path one copy of every
// byte (issue 37). It holds what a circuit received and its application
// has not read yet, and nothing when empty.
type chunkBuf struct {
	pieces []piece
	r      int // read offset in pieces[0]
	n      int // bytes held
}

// piece is a chunk (b is its filled part) or a kept payload.
type piece struct {
	b    []byte
	c    *chunk
	kept *[]byte
}

func (b *chunkBuf) Len() int { return b.n }

// Write appends a copy of p.
func (b *chunkBuf) Write(p []byte) {
	for len(p) > 0 {
		last := len(b.pieces) - 1
		if last < 0 || b.pieces[last].c == nil || len(b.pieces[last].b) == chunkSize {
			c := chunkPool.Get().(*chunk)
			b.pieces = append(b.pieces, piece{b: c[:0], c: c})
			last++
		}
		w := b.pieces[last].b
		k := copy(w[len(w):chunkSize], p)
		b.pieces[last].b = w[:len(w)+k]
		b.n += k
		p = p[k:]
	}
}

// WriteKept appends (*body)[:n], a buffer from wire.Frame.Keep, without
// copying it; the buffer goes back to its pool once read (or at Reset).
func (b *chunkBuf) WriteKept(body *[]byte, n int) {
	b.pieces = append(b.pieces, piece{b: (*body)[:n], kept: body})
	b.n += n
}

// Read takes up to len(p) bytes.
func (b *chunkBuf) Read(p []byte) int {
	n := 0
	for len(p) > 0 && b.n > 0 {
		k := copy(p, b.pieces[0].b[b.r:])
		b.r += k
		b.n -= k
		n += k
		p = p[k:]
		if b.r == len(b.pieces[0].b) {
			b.drop()
		}
	}
	return n
}

// drop releases the first piece, fully read.
func (b *chunkBuf) drop() {
	b.pieces[0].release()
	b.pieces[0] = piece{}
	b.pieces = b.pieces[1:]
	b.r = 0
	if len(b.pieces) == 0 {
		b.pieces = nil
	}
}

func (p piece) release() {
	if p.kept != nil {
		wire.PutBody(p.kept)
	} else if p.c != nil {
		chunkPool.Put(p.c)
	}
}

// Reset releases everything.
func (b *chunkBuf) Reset() {
	for _, p := range b.pieces {
		p.release()
	}
	*b = chunkBuf{}
}
