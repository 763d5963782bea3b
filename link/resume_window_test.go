package link

import (
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// latencyConn is one end of a connection whose bytes take a fixed time to
// arrive, as over a long path of unbounded bandwidth: Write never waits.
// Its waits are channel operations and sleeps, so that in a synctest
// bubble the latency costs no real time.
type latencyConn struct {
	in, out *latencyPipe
	name    string
}

type latencyPipe struct {
	d      time.Duration
	mu     sync.Mutex
	q      []latencyChunk
	notify chan struct{} // a chunk came
	closed chan struct{}
	once   sync.Once
}

type latencyChunk struct {
	due time.Time
	b   []byte
}

// latencyPair returns a connected pair with latency d each way.
func latencyPair(d time.Duration, name string) (net.Conn, net.Conn) {
	ab := &latencyPipe{d: d, notify: make(chan struct{}, 1), closed: make(chan struct{})}
	ba := &latencyPipe{d: d, notify: make(chan struct{}, 1), closed: make(chan struct{})}
	return &latencyConn{in: ba, out: ab, name: name}, &latencyConn{in: ab, out: ba, name: name}
}

func (c *latencyConn) Write(p []byte) (int, error) {
	select {
	case <-c.out.closed:
		return 0, net.ErrClosed
	default:
	}
	c.out.mu.Lock()
	c.out.q = append(c.out.q, latencyChunk{due: time.Now().Add(c.out.d), b: append([]byte(nil), p...)})
	c.out.mu.Unlock()
	select {
	case c.out.notify <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (c *latencyConn) Read(p []byte) (int, error) {
	for {
		c.in.mu.Lock()
		if len(c.in.q) > 0 {
			head := &c.in.q[0]
			if wait := time.Until(head.due); wait > 0 {
				c.in.mu.Unlock()
				select {
				case <-time.After(wait):
				case <-c.in.closed:
					return 0, io.EOF
				}
				continue
			}
			n := copy(p, head.b)
			if head.b = head.b[n:]; len(head.b) == 0 {
				c.in.q = c.in.q[1:]
			}
			c.in.mu.Unlock()
			return n, nil
		}
		c.in.mu.Unlock()
		select {
		case <-c.in.notify:
		case <-c.in.closed:
			return 0, io.EOF
		}
	}
}

func (c *latencyConn) Close() error {
	for _, p := range []*latencyPipe{c.in, c.out} {
		p.once.Do(func() { close(p.closed) })
	}
	return nil
}

func (c *latencyConn) LocalAddr() net.Addr                { return latencyAddr(c.name) }
func (c *latencyConn) RemoteAddr() net.Addr               { return latencyAddr(c.name) }
func (c *latencyConn) SetDeadline(t time.Time) error      { return nil }
func (c *latencyConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *latencyConn) SetWriteDeadline(t time.Time) error { return nil }

type latencyAddr string

func (a latencyAddr) Network() string { return "pipe" }
func (a latencyAddr) String() string  { return string(a) }

// latencyLink is a resumable link between two sessions over connections
// of the given latencies (one connection each), without redials.
func latencyLink(t *testing.T, cfg Config, window int, latencies ...time.Duration) (a, b *session) {
	var id LinkID
	id[0] = 7
	b = newSession(id, cfg, window, nil)
	a = newSession(id, cfg, window, nil)
	for i, d := range latencies {
		ca, cb := latencyPair(d, "conn "+string(rune('a'+i)))
		if err := b.add(cb); err != nil {
			t.Fatal(err)
		}
		if err := a.add(ca); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

// sendOver writes data on a's Writer and closes it, reads b's stream with
// read, checks it came whole, and closes both sessions.
func sendOver(t *testing.T, a, b *session, data []byte, read func(io.Reader) ([]byte, error)) {
	t.Helper()
	werr := make(chan error, 1)
	go func() {
		_, err := a.w.Write(data)
		if err == nil {
			err = a.w.Close()
		}
		werr <- err
	}()
	got, err := read(b.r)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write: %v", err)
	}
	sameData(t, got, data)
	for _, err := range closeAll(time.Minute, a, b) {
		if err != nil {
			t.Errorf("close: %v", err)
		}
	}
}

// On a long path that carries whatever it is given, the window is what
// holds a resumable link back: it grows from startWindow, and never past
// the window agreed.
func TestResumeWindowGrows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer func(w int) { startWindow = w }(startWindow)
		startWindow = minWindow
		window := 4 * minWindow
		a, b := latencyLink(t, Config{BlockSize: 64 << 10}, window, 20*time.Millisecond, 20*time.Millisecond)
		data := randomData(rand.New(rand.NewPCG(5, 6)), 40<<20)
		sendOver(t, a, b, data, io.ReadAll)
		ws, rs := a.w.Stats(), b.r.Stats()
		t.Logf("window %d, grew from %d to %d (agreed %d); kept up to %d; the peer held up to %d", window, minWindow, ws.Window, window, ws.MaxKept, rs.MaxBuffered)
		if ws.Window <= minWindow {
			t.Errorf("the window stayed at %d bytes on a path it held back", ws.Window)
		}
		if ws.Window > window || ws.MaxKept > window || rs.MaxBuffered > window {
			t.Errorf("window %d, kept up to %d, held up to %d: beyond the %d agreed", ws.Window, ws.MaxKept, rs.MaxBuffered, window)
		}
	})
}

// A peer that reads slowly holds the window full, but more room would not
// raise the rate: the window grows at most once (the try), not up to the
// window agreed.
func TestResumeWindowSlowReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer func(w int) { startWindow = w }(startWindow)
		startWindow = minWindow
		window := 16 * minWindow
		a, b := latencyLink(t, Config{BlockSize: 64 << 10}, window, 5*time.Millisecond)
		data := randomData(rand.New(rand.NewPCG(7, 8)), 12<<20)
		slowly := func(r io.Reader) ([]byte, error) {
			var got []byte
			buf := make([]byte, 64<<10)
			for {
				time.Sleep(10 * time.Millisecond) // 6.4 MB/s
				n, err := r.Read(buf)
				got = append(got, buf[:n]...)
				if err == io.EOF {
					return got, nil
				}
				if err != nil {
					return got, err
				}
			}
		}
		sendOver(t, a, b, data, slowly)
		ws := a.w.Stats()
		t.Logf("window %d at the end (started at %d, agreed %d); kept up to %d; Write waited %s", ws.Window, minWindow, window, ws.MaxKept, ws.WindowWait)
		if ws.Window > 2*minWindow {
			t.Errorf("the window grew to %d bytes for a peer that reads slowly, want at most %d", ws.Window, 2*minWindow)
		}
	})
}
