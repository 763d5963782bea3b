package exec

import (
	"io"
	"sync"
)

// gatherSize is gather's buffer: what it can hold while the writer is
// busy, and so the largest write it makes.
const gatherSize = MaxData

// gatherFirst is the buffer of gather's first read: a command whose
// stdin never comes (MPICH's proxies) holds this much, not gatherSize.
const gatherFirst = 16 << 10

// gather copies src to dst through a ring buffer, reading and writing in
// two goroutines: while a write is under way, reads go on filling the
// buffer, and the next write takes all they gathered. A link's reads
// return a TLS record at a time (16 KiB at most); written one by one into
// a command's pipe, each is a write of its own and a wake-up of the
// command. It returns src's error (nil at EOF) once every byte read is
// written, or errWriter(err) when a write fails (the rest is not read).
func gather(dst io.Writer, src io.Reader) error {
	first := make([]byte, gatherFirst)
	n, err := src.Read(first)
	if n > 0 {
		if _, werr := dst.Write(first[:n]); werr != nil {
			return writerError{werr}
		}
	}
	if err == io.EOF {
		return nil
	}
	if err != nil {
		return err
	}
	g := &ring{buf: make([]byte, gatherSize)}
	g.cond = sync.NewCond(&g.mu)
	go g.fill(src)
	for {
		g.mu.Lock()
		for g.r == g.w && g.rerr == nil {
			g.cond.Wait()
		}
		if g.r == g.w {
			err := g.rerr
			g.mu.Unlock()
			if err == io.EOF {
				return nil
			}
			return err
		}
		i := g.r % gatherSize
		end := min(g.w, g.r-i+gatherSize) // contiguous up to the buffer's end
		b := g.buf[i : i+int(end-g.r)]
		g.mu.Unlock()
		n, err := dst.Write(b)
		g.mu.Lock()
		g.r += int(n)
		if err != nil {
			g.wdone = true
		}
		g.cond.Broadcast()
		g.mu.Unlock()
		if err != nil {
			return writerError{err}
		}
	}
}

// writerError is gather's failed write.
type writerError struct{ err error }

func (e writerError) Error() string { return e.err.Error() }
func (e writerError) Unwrap() error { return e.err }

// ring is gather's buffer: bytes r..w (positions since the start) are
// read and not yet written.
type ring struct {
	buf   []byte
	mu    sync.Mutex
	cond  *sync.Cond
	r, w  int
	rerr  error // the read that ended fill
	wdone bool  // a write failed: fill stops
}

// fill reads src into the free part of the buffer until src ends or a
// write fails.
func (g *ring) fill(src io.Reader) {
	for {
		g.mu.Lock()
		for g.w-g.r == gatherSize && !g.wdone {
			g.cond.Wait()
		}
		if g.wdone {
			g.mu.Unlock()
			return
		}
		i := g.w % gatherSize
		free := min(gatherSize-(g.w-g.r), gatherSize-i)
		b := g.buf[i : i+free]
		g.mu.Unlock()
		n, err := src.Read(b)
		g.mu.Lock()
		g.w += n
		if err != nil {
			g.rerr = err
		}
		g.cond.Broadcast()
		g.mu.Unlock()
		if err != nil {
			return
		}
	}
}
