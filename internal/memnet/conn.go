package memnet

import (
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"
)

// window is how many bytes a direction buffers before Write waits for
// the reader.
const window = 4 << 20

// Conn is one end of an in-memory stream: writes land in the other end's
// buffer (up to window bytes, then Write waits), reads take from its own.
type Conn struct {
	local, remote netip.AddrPort
	in, out       *buffer
	rd, wd        deadline
	once          sync.Once
	closed        chan struct{}
}

// Pipe returns the two ends of a stream between addresses a and b (a's
// end first).
func Pipe(a, b netip.AddrPort) (*Conn, *Conn) {
	ab, ba := newBuffer(), newBuffer()
	ca := &Conn{local: a, remote: b, in: ba, out: ab, rd: makeDeadline(), wd: makeDeadline(), closed: make(chan struct{})}
	cb := &Conn{local: b, remote: a, in: ab, out: ba, rd: makeDeadline(), wd: makeDeadline(), closed: make(chan struct{})}
	return ca, cb
}

// buffer is one direction of a stream.
type buffer struct {
	mu     sync.Mutex
	data   [][]byte      // written and not read yet, in the order written
	size   int           // bytes in data
	eof    bool          // the writer closed (or closed its write side)
	reset  bool          // the reader closed: writes fail
	ready  chan struct{} // a token when data or eof arrives
	space  chan struct{} // a token when the reader took data
	closed chan struct{} // closed with reset
}

func newBuffer() *buffer {
	return &buffer{ready: make(chan struct{}, 1), space: make(chan struct{}, 1), closed: make(chan struct{})}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (c *Conn) Read(p []byte) (int, error) {
	b := c.in
	for {
		select {
		case <-c.closed:
			return 0, c.opErr("read", net.ErrClosed)
		default:
		}
		if c.rd.expired() {
			return 0, c.opErr("read", os.ErrDeadlineExceeded)
		}
		b.mu.Lock()
		if b.size > 0 {
			n := 0
			for n < len(p) && len(b.data) > 0 {
				k := copy(p[n:], b.data[0])
				n += k
				if b.data[0] = b.data[0][k:]; len(b.data[0]) == 0 {
					b.data[0] = nil
					b.data = b.data[1:]
				}
			}
			b.size -= n
			b.mu.Unlock()
			signal(b.space)
			return n, nil
		}
		eof := b.eof
		b.mu.Unlock()
		if eof {
			return 0, io.EOF
		}
		if len(p) == 0 {
			return 0, nil
		}
		select {
		case <-b.ready:
		case <-c.closed:
		case <-c.rd.wait():
		}
	}
}

func (c *Conn) Write(p []byte) (int, error) {
	b := c.out
	n := 0
	for {
		select {
		case <-c.closed:
			return n, c.opErr("write", net.ErrClosed)
		default:
		}
		if c.wd.expired() {
			return n, c.opErr("write", os.ErrDeadlineExceeded)
		}
		b.mu.Lock()
		switch {
		case b.reset:
			b.mu.Unlock()
			return n, c.opErr("write", &os.SyscallError{Syscall: "write", Err: errReset})
		case b.eof:
			b.mu.Unlock()
			return n, c.opErr("write", &os.SyscallError{Syscall: "write", Err: errPipe})
		}
		k := min(len(p)-n, window-b.size)
		if k > 0 {
			b.data = append(b.data, append([]byte(nil), p[n:n+k]...))
			b.size += k
		}
		n += k
		b.mu.Unlock()
		if k > 0 {
			signal(b.ready)
		}
		if n == len(p) {
			return n, nil
		}
		select {
		case <-b.space:
		case <-b.closed:
		case <-c.closed:
		case <-c.wd.wait():
		}
	}
}

// CloseWrite ends the stream this end writes: the other end reads EOF.
func (c *Conn) CloseWrite() error {
	c.out.mu.Lock()
	c.out.eof = true
	c.out.mu.Unlock()
	signal(c.out.ready)
	return nil
}

// Close ends both directions: the other end reads EOF after what was
// written, and its writes fail.
func (c *Conn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.CloseWrite()
		c.in.mu.Lock()
		c.in.reset = true
		c.in.data, c.in.size = nil, 0
		c.in.mu.Unlock()
		close(c.in.closed)
		c.rd.set(time.Time{})
		c.wd.set(time.Time{})
	})
	return nil
}

func (c *Conn) LocalAddr() net.Addr  { return net.TCPAddrFromAddrPort(c.local) }
func (c *Conn) RemoteAddr() net.Addr { return net.TCPAddrFromAddrPort(c.remote) }

func (c *Conn) SetDeadline(t time.Time) error {
	c.rd.set(t)
	c.wd.set(t)
	return nil
}

func (c *Conn) SetReadDeadline(t time.Time) error  { c.rd.set(t); return nil }
func (c *Conn) SetWriteDeadline(t time.Time) error { c.wd.set(t); return nil }

func (c *Conn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
