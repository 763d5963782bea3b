package agent

import (
	"io"
	"net"
	"sync"
)

// joinBuffer is the copy buffer of each direction of Join: large, so that
// a relayed stream costs few system calls.
const joinBuffer = 256 << 10

var joinBufs = sync.Pool{New: func() any { return new([joinBuffer]byte) }}

// Join copies between a and b both ways until both directions end, then
// closes both. When one side's sending ends cleanly (EOF), the other side's
// sending half is closed (CloseWrite, where the connection has it), so
// half-closing protocols (ssh, scp, nc-style EOF) work; an error in either
// direction closes both at once. It returns the bytes copied a→b and b→a.
func Join(a, b net.Conn) (ab, ba int64) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ba = half(a, b, a, b)
	}()
	ab = half(b, a, a, b)
	wg.Wait()
	a.Close()
	b.Close()
	return ab, ba
}

// half copies src to dst, then half-closes dst or, on an error, closes
// both x and y.
func half(dst, src, x, y net.Conn) int64 {
	buf := joinBufs.Get().(*[joinBuffer]byte)
	defer joinBufs.Put(buf)
	// no ReaderFrom/WriterTo shortcuts except the kernel's: a TCP or unix
	// socket on both ends lets io.Copy splice.
	n, err := io.CopyBuffer(dst, src, buf[:])
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
		if cw.CloseWrite() == nil {
			return n
		}
	}
	x.Close()
	y.Close()
	return n
}
