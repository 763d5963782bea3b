package control

import (
	"io"
	"net"
	"sync"
)

// JoinBuffer is the copy buffer of each direction of Join: large, so that
// a relayed stream costs few system calls.
const JoinBuffer = 256 << 10

var joinBufs = sync.Pool{New: func() any { return new([JoinBuffer]byte) }}

// Join copies between a and b both ways until both directions end, then
// closes both. When one side's sending ends cleanly (EOF), the other side's
// sending half is closed (CloseWrite, where the connection has it), so
// half-closing protocols (ssh, scp, nc-style EOF) work; an error in either
// direction closes both at once. It returns the bytes copied a→b and b→a.
func Join(a, b net.Conn) (ab, ba int64) {
	ab, ba, _ = JoinErr(a, b)
	return ab, ba
}

// JoinErr is Join, and returns the error that ended the stream: the
// first to happen in either direction (nil if both ended cleanly), not
// the ones closing both ends then caused. A stream over the overlay
// that a hub's death cut fails naming that hub, say.
func JoinErr(a, b net.Conn) (ab, ba int64, err error) {
	var first struct {
		sync.Once
		err error
	}
	fail := func(e error) { first.Do(func() { first.err = e }) }
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ba = half(a, b, a, b, fail)
	}()
	ab = half(b, a, a, b, fail)
	wg.Wait()
	a.Close()
	b.Close()
	return ab, ba, first.err
}

// half copies src to dst, then half-closes dst or, on an error, hands it
// to fail and closes both x and y.
func half(dst, src, x, y net.Conn, fail func(error)) int64 {
	buf := joinBufs.Get().(*[JoinBuffer]byte)
	defer joinBufs.Put(buf)
	var n int64
	var err error
	if KernelSocket(dst) && KernelSocket(src) {
		// TCP and unix sockets: their ReadFrom and WriteTo splice.
		n, err = io.CopyBuffer(dst, src, buf[:])
	} else {
		// anything else through buf: a TCP end's ReadFrom or WriteTo
		// would fall back to io.Copy's 32 KiB buffer, which costs 8 times
		// the reads, writes and wake-ups, and hands a link small writes.
		n, err = io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf[:])
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
		if err = cw.CloseWrite(); err == nil {
			return n
		}
	}
	if err != nil {
		fail(err)
		// a cut stream must not look finished: a TCP end is reset, not
		// closed with a FIN its program would read as the end of the data
		abort(x)
		abort(y)
	}
	x.Close()
	y.Close()
	return n
}

// abort makes a TCP connection's close a reset (SO_LINGER 0). Other
// conns are left to Close.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
}

// KernelSocket says whether c is a TCP or unix stream socket.
func KernelSocket(c net.Conn) bool {
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
		return true
	}
	return false
}
