package link

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// slowConn delays and cuts the Writes (or the Reads) of a connection: a
// stream slower than the others, by a random amount per call. Its sleeps
// are latency simulated on real time: the links it slows run on loopback
// TCP as well as net.Pipe.
type slowConn struct {
	net.Conn
	delay time.Duration // at most this long before each call
	chunk int           // at most this many bytes per call
	reads bool          // slow down Read instead of Write
}

func (c *slowConn) Write(p []byte) (int, error) {
	if c.reads || c.delay == 0 {
		return c.Conn.Write(p)
	}
	n := 0
	for len(p) > 0 {
		k := min(len(p), c.chunk)
		time.Sleep(rand.N(c.delay))
		m, err := c.Conn.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

func (c *slowConn) Read(p []byte) (int, error) {
	if !c.reads || c.delay == 0 {
		return c.Conn.Read(p)
	}
	time.Sleep(rand.N(c.delay))
	return c.Conn.Read(p[:min(len(p), c.chunk)])
}

// net is a source of connected pairs: net.Pipe or loopback TCP.
type pairs struct {
	t  *testing.T
	ln net.Listener
}

func newPairs(t *testing.T) *pairs {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &pairs{t: t, ln: ln}
}

func (p *pairs) tcp() (net.Conn, net.Conn) {
	p.t.Helper()
	c, err := net.Dial("tcp", p.ln.Addr().String())
	if err != nil {
		p.t.Fatal(err)
	}
	s, err := p.ln.Accept()
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// random returns a pair of either kind; either end may be slowed down.
func (p *pairs) random(rng *rand.Rand) (w, r net.Conn) {
	if rng.IntN(2) == 0 {
		w, r = net.Pipe()
	} else {
		w, r = p.tcp()
	}
	switch rng.IntN(3) {
	case 0:
		w = &slowConn{Conn: w, delay: time.Duration(rng.IntN(2000)) * time.Microsecond, chunk: 1 + rng.IntN(64<<10)}
	case 1:
		r = &slowConn{Conn: r, delay: time.Duration(rng.IntN(2000)) * time.Microsecond, chunk: 1 + rng.IntN(64<<10), reads: true}
	}
	return w, r
}

func randomData(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// mixedData returns n bytes: random bytes, text (TextData) or both, in
// chunks of random lengths.
func mixedData(rng *rand.Rand, n int) []byte {
	kind := rng.IntN(3)
	b := make([]byte, 0, n)
	for len(b) < n {
		k := min(n-len(b), 1+rng.IntN(512<<10))
		if kind == 0 || kind == 2 && rng.IntN(2) == 0 {
			b = append(b, randomData(rng, k)...)
		} else {
			b = append(b, TextData(rng.Int64(), k)...)
		}
	}
	return b
}

// readAll reads r to its end in goroutine; the result comes on the channel.
type readResult struct {
	data []byte
	err  error
}

func readAll(r io.Reader) <-chan readResult {
	ch := make(chan readResult, 1)
	go func() {
		var buf bytes.Buffer
		_, err := io.Copy(&buf, r)
		ch <- readResult{buf.Bytes(), err}
	}()
	return ch
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: timed out", what)
		panic("unreachable")
	}
}

func sameData(t *testing.T, got, want []byte) {
	t.Helper()
	if sha256.Sum256(got) != sha256.Sum256(want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("received %d bytes, sent %d: they differ from byte %d on", len(got), len(want), i)
	}
}

// rawStreams gives a Reader n connections whose other ends the test
// writes raw blocks to.
func rawStreams(t *testing.T, cfg Config, n int) (*Reader, []net.Conn) {
	var ends, conns []net.Conn
	for range n {
		a, b := net.Pipe()
		ends, conns = append(ends, a), append(conns, b)
	}
	r := NewReader(cfg, conns...)
	t.Cleanup(func() {
		for _, e := range ends {
			e.Close()
		}
		r.Close()
	})
	return r, ends
}

// send writes blocks to c in a goroutine; the returned group waits for it.
func send(c net.Conn, blocks ...[]byte) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, b := range blocks {
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	})
	return &wg
}

func data(off uint64, p string) []byte {
	return AppendBlock(nil, Header{Kind: KindData, Offset: off}, []byte(p))
}

func end(total uint64) []byte { return AppendBlock(nil, Header{Kind: KindEnd, Offset: total}, nil) }

func ack(off uint64, flags uint8) []byte {
	return AppendBlock(nil, Header{Kind: KindAck, Flags: flags, Offset: off}, nil)
}

// rateLink is a shared bottleneck: the connections wrapped by conn together
// send at most rate bytes per second, as over one slow network link.
type rateLink struct {
	mu   sync.Mutex
	rate float64
	next time.Time // when the link is free again
}

func newRateLink(bytesPerSec float64) *rateLink { return &rateLink{rate: bytesPerSec} }

func (l *rateLink) conn(c net.Conn) net.Conn { return &rateConn{Conn: c, link: l} }

type rateConn struct {
	net.Conn
	link *rateLink
}

// Write sends p in pieces of at most 64 KiB, each once the link is free
// (a rate simulated on real time: its connections are loopback TCP too).
func (c *rateConn) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), 64<<10)
		l := c.link
		l.mu.Lock()
		start := time.Now()
		if l.next.After(start) {
			start = l.next
		}
		l.next = start.Add(time.Duration(float64(k) / l.rate * float64(time.Second)))
		l.mu.Unlock()
		time.Sleep(time.Until(start))
		m, err := c.Conn.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}
