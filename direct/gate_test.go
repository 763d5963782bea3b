package direct

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeConn is a connection from a given address that records its Close.
type fakeConn struct {
	net.Conn
	from   *net.TCPAddr
	closed atomic.Bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.from }
func (c *fakeConn) Close() error         { c.closed.Store(true); return nil }

func fake(ip string, port int) *fakeConn {
	return &fakeConn{from: &net.TCPAddr{IP: net.ParseIP(ip), Port: port}}
}

// The gate sheds the oldest pending connection that has not sent its first
// message, from the newcomer's address when that one has too many idle
// ones, else, once full, from the address holding the most, else from
// anywhere; never the newcomer, and never handshakes in progress while
// there is room.
func TestGateShedsOldestIdle(t *testing.T) {
	g := &Gate{Max: 5, PerSource: 2}
	a1, a2, a3 := fake("127.1.0.1", 1), fake("127.1.0.1", 2), fake("127.1.0.1", 3)
	pa1, _ := g.Admit(a1)
	pa2, _ := g.Admit(a2)
	pa1.Hello() // a1 spoke: it does not count against its address's idle bound
	if _, shed := g.Admit(a3); shed != nil {
		t.Fatalf("third from one address, one idle before it: shed %+v", shed)
	}
	a4 := fake("127.1.0.1", 4)
	_, shed := g.Admit(a4)
	if shed == nil || !a2.closed.Load() || a1.closed.Load() || !strings.Contains(shed.Reason, "per address") {
		t.Fatalf("third idle from one address: shed %+v, a1 closed %v, a2 closed %v; want a2 shed for its address", shed, a1.closed.Load(), a2.closed.Load())
	}
	if !errors.Is(pa2.Err(), ErrShed) || pa1.Err() != nil {
		t.Errorf("Err: a1 %v, a2 %v", pa1.Err(), pa2.Err())
	}
	b1, b2 := fake("127.2.0.1", 1), fake("127.3.0.1", 1)
	g.Admit(b1)
	if n := g.Len(); n != 4 {
		t.Fatalf("pending %d, want 4", n)
	}
	g.Admit(b2)
	// Full (a1, a3, a4, b1, b2): 127.1.0.1 holds 3, over its bound of 2:
	// its oldest idle one (a3; a1 spoke) goes.
	c := fake("127.4.0.1", 1)
	_, shed = g.Admit(c)
	if shed == nil || !a3.closed.Load() || a1.closed.Load() || !strings.Contains(shed.Reason, "in all") {
		t.Fatalf("full: shed %+v, a3 closed %v; want a3 shed", shed, a3.closed.Load())
	}
	// Full again, no address over its bound: the oldest idle one anywhere
	// (a4) goes.
	_, shed = g.Admit(fake("127.5.0.1", 1))
	if shed == nil || !a4.closed.Load() || b1.closed.Load() {
		t.Fatalf("full, spread: shed %+v, a4 closed %v, b1 closed %v; want a4 shed", shed, a4.closed.Load(), b1.closed.Load())
	}
	pa1.Done()
	pa1.Done() // twice is fine
	if n := g.Len(); n != 4 {
		t.Errorf("pending %d after Done, want 4", n)
	}
	if g.Shed() != 3 {
		t.Errorf("shed %d, want 3", g.Shed())
	}
	// Many handshakes in progress from one address (a NATed site): none is
	// shed while the gate has room.
	gn := &Gate{Max: 100, PerSource: 2}
	for i := range 50 {
		p, shed := gn.Admit(fake("127.9.0.1", i))
		if shed != nil {
			t.Fatalf("handshake %d from one address shed %+v with room left", i, shed)
		}
		p.Hello()
	}
	// IPv6 sources count by /64.
	g6 := &Gate{Max: 10, PerSource: 1}
	g6.Admit(fake("2001:db8:1:2::1", 1))
	if _, shed := g6.Admit(fake("2001:db8:1:2::ffff", 1)); shed == nil {
		t.Error("a second connection from the same /64 was not counted against it")
	}
	if _, shed := g6.Admit(fake("2001:db8:1:3::1", 1)); shed != nil {
		t.Errorf("another /64 shed %+v", shed)
	}
	// Out of descriptors: the oldest idle one (b1) goes.
	if s, ok := g.ShedOldest("test"); !ok || !b1.closed.Load() || s.From != b1.from.String() {
		t.Errorf("ShedOldest: %+v %v", s, ok)
	}
}

// A flood of idle connections (more than the 1024 handshakes the listener
// held before it stopped accepting) does not keep a dialler out: it
// connects at once.
func TestListenFloodIdle(t *testing.T) {
	srv, cli := testCreds(t, 1), testCreds(t, 2)
	var logs bytes.Buffer
	var logMu sync.Mutex
	l := testListen(t, ListenConfig{Creds: srv, Addr: "127.0.0.1", Logger: slog.New(slog.NewTextHandler(lockedWriter{&logs, &logMu}, nil))})
	const flood = 1100
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range flood {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 30, byte(i/200), byte(i%200+1))}}
		c, err := d.Dial("tcp4", l.Addr().String())
		if err != nil {
			t.Fatalf("flood connection %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	time.Sleep(100 * time.Millisecond) // the listener has taken them (real sockets: no synthetic time)
	go echo(l)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	c, err := (&Dialer{Creds: cli, Local: noLocal}).Dial(ctx, l.Machine(srv.Key.ID(), "srv"), "")
	if err != nil {
		t.Fatalf("dial during a flood of %d idle connections: %v", flood, err)
	}
	c.Close()
	took := time.Since(start)
	t.Logf("dial during the flood: %v; pending %d, shed %d", took, l.gate.Len(), l.gate.Shed())
	if took > time.Second {
		t.Errorf("dial during a flood of %d idle connections took %v, want under 1 s", flood, took)
	}
	logMu.Lock()
	lines := strings.Count(logs.String(), "\n")
	logMu.Unlock()
	if lines > 20 {
		t.Errorf("the listener logged %d lines for %d shed connections, want them rate-limited", lines, l.gate.Shed())
	}
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Quiet lets the first lines of a reason through, holds the rest back and
// sums them up when the interval ends: exactly then, on synthetic time.
func TestQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var summaries []string
		start := time.Now()
		q := NewQuiet(2, 50*time.Millisecond, func(reason QuietKind, more int, since time.Time) {
			mu.Lock()
			defer mu.Unlock()
			summaries = append(summaries, fmt.Sprintf("%d more %s since +%v", more, reason, since.Sub(start)))
		})
		got := func() string {
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			return strings.Join(summaries, "; ")
		}
		passed := 0
		for range 10 {
			if q.Allow("shed") {
				passed++
			}
		}
		if !q.Allow("other reason") {
			t.Error("a second reason was held back")
		}
		if passed != 2 {
			t.Errorf("%d of 10 passed, want 2", passed)
		}
		time.Sleep(50*time.Millisecond - 1)
		if s := got(); s != "" {
			t.Errorf("summaries %q before the interval ended", s)
		}
		time.Sleep(1)
		if s := got(); s != "8 more shed since +0s" {
			t.Errorf("summaries %q at the end of the interval, want \"8 more shed since +0s\"", s)
		}
		if !q.Allow("shed") {
			t.Error("a new interval held the first line back")
		}
		time.Sleep(time.Hour)
		if s := got(); s != "8 more shed since +0s" {
			t.Errorf("summaries %q: a summary for an interval that held nothing back", s)
		}
	})
}

// ReadFirstRecord returns a whole first handshake record, or an error.
func FuzzReadFirstRecord(f *testing.F) {
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x02, 0x01, 0x00})
	f.Add([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01})
	f.Add([]byte("GET / HTTP/1.0\r\n\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, have := range [][]byte{nil, b[:min(1, len(b))]} {
			rest := b[len(have):]
			got, err := ReadFirstRecord(bytes.NewReader(rest), have)
			if err != nil {
				continue
			}
			if len(got) < recordHeader || got[0] != recordHandshake || len(got) != recordHeader+(int(got[3])<<8|int(got[4])) || !bytes.HasPrefix(b, got) {
				t.Fatalf("ReadFirstRecord(%x) = %x", b, got)
			}
		}
	})
}

// A ReplayConn whose replayed bytes are read keeps none of their buffer:
// an empty tail of it still pointed into the record (a hub kept every
// node's ClientHello, 2 KiB a node, BenchmarkHubRSS's profile).
func TestReplayConnDropsReplayedBytes(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := &ReplayConn{Conn: a, Pending: []byte("hello")}
	buf := make([]byte, 3)
	for _, want := range []string{"hel", "lo"} {
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("read %q, %v; want %q", buf[:n], err, want)
		}
	}
	if c.Pending != nil {
		t.Errorf("replayed bytes read, and the connection keeps a buffer of %d", cap(c.Pending))
	}
	go b.Write([]byte("x"))
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "x" {
		t.Fatalf("read %q, %v after the replay; want the connection's %q", buf[:n], err, "x")
	}
}
