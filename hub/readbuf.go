package hub

import (
	"io"
	"sync"

	"github.com/gridlink/gridlink/wire"
)

// A trunk's read buffer. Most of a hub's trunks are idle nodes' (a ping
// every few seconds), and each one's reader waits in a read most of the
// time: whatever buffer that read is given stays held while it waits.
// bufio's 8 KiB each were the largest part of a hub's memory per idle
// node (8 of 15 KiB of heap, BenchmarkHubRSS's profile, issue 23). A
// trunk now reads into a small buffer of its own while little arrives,
// and borrows a pooled one (readBuffer) only while more is waiting than
// the small one holds; it returns it once the frames in it are read.
// What the reader does with the bytes does not change: frame payloads
// larger than the buffer are still read straight into the frame reader's
// payload, not copied through it.
const (
	// idleRead is the trunk's own buffer: a few small frames (sealed
	// pings, pongs and windows are 44 to 48 bytes).
	idleRead = 256
	// readBuffer is the pooled buffer of a busy trunk: small frames
	// (control, windows) arrive many per read; a data frame's payload
	// mostly bypasses it.
	readBuffer = 8 << 10
)

var readPool = sync.Pool{New: func() any { return new([readBuffer]byte) }}

// leanReader buffers a connection's reads like a bufio.Reader of
// readBuffer bytes, but holds no more than idleRead bytes of its own
// while nothing is buffered (see above). Not safe for concurrent use.
type leanReader struct {
	c    io.Reader
	own  [idleRead]byte
	big  *[readBuffer]byte // borrowed from readPool while it holds bytes (or is being filled)
	buf  []byte            // own[:] or big[:]: where buffered bytes are
	r, w int               // buf[r:w] is buffered
	busy bool              // the last fill filled its buffer: more is likely waiting
	err  error             // from a read that also returned bytes, for the next empty read
}

// NewFrameReader returns the frame reader of a trunk's connection c
// (a lean buffer, see above).
func NewFrameReader(c io.Reader) *wire.Reader { return wire.NewReader(&leanReader{c: c}) }

// Read reads like bufio.Reader.Read: buffered bytes first; with none, a
// read of at least readBuffer bytes goes straight to c, a smaller one
// fills the buffer (the small one, or a pooled one after a fill that
// came back full).
func (b *leanReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.r == b.w {
		if b.err != nil {
			err := b.err
			b.err = nil
			return 0, err
		}
		if len(p) >= readBuffer {
			b.busy = false // a frame's payload read in place: the next header is a fresh start
			return b.c.Read(p)
		}
		buf := b.own[:]
		if b.busy {
			b.big = readPool.Get().(*[readBuffer]byte)
			buf = b.big[:]
		}
		n, err := b.c.Read(buf)
		b.busy = n == len(buf)
		if n <= 0 {
			b.release()
			return 0, err
		}
		b.buf, b.r, b.w, b.err = buf, 0, n, err
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	if b.r == b.w {
		b.release()
	}
	return n, nil
}

// release returns a borrowed buffer, once empty.
func (b *leanReader) release() {
	if b.big != nil {
		readPool.Put(b.big)
		b.big = nil
	}
	b.buf, b.r, b.w = nil, 0, 0
}
