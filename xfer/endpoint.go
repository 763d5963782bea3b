package xfer

import (
	"bufio"
	"net"
	"sync"
)

// endpoint is one end of a session: frames in (one reading goroutine)
// and out (any goroutine), buffered; flush sends what is buffered.
type endpoint struct {
	c   net.Conn
	r   *bufio.Reader
	buf []byte

	mu sync.Mutex
	w  frameWriter
}

const ioBuffer = 256 << 10

func newEndpoint(c net.Conn) *endpoint {
	return &endpoint{c: c, r: bufio.NewReaderSize(c, ioBuffer), w: frameWriter{w: bufio.NewWriterSize(c, ioBuffer)}}
}

func (e *endpoint) send(typ byte, payload ...[]byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.w.write(typ, payload...)
}

func (e *endpoint) flush() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.w.w.Flush()
}

// sendNow sends a frame and flushes.
func (e *endpoint) sendNow(typ byte, payload ...[]byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.w.write(typ, payload...); err != nil {
		return err
	}
	return e.w.w.Flush()
}

// recv reads the next frame; its payload is valid until the next recv.
// It flushes first when nothing is buffered to read: a peer may be
// waiting for what this end wrote before it writes again.
func (e *endpoint) recv() (byte, []byte, error) {
	if e.r.Buffered() == 0 {
		if err := e.flush(); err != nil {
			return 0, nil, err
		}
	}
	return readFrame(e.r, &e.buf)
}
