package link

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/vconn"
)

// logs collects a listener's log lines.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logs) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// cutAll closes every connection a resumable link has now, at this end,
// as a network failure would; it returns how many.
func cutAll(c *Conn) int {
	c.rs.mu.Lock()
	live := append([]*duplex(nil), c.rs.live...)
	c.rs.mu.Unlock()
	for _, d := range live {
		d.c.Close()
	}
	return len(live)
}

// echoBack sends back what it reads on one accepted link, then
// half-closes and closes; the result comes on the channel.
func echoBack(l *Listener) <-chan error {
	done := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(c, c)
		if err == nil {
			err = c.(*Conn).CloseWrite()
		}
		if cerr := c.Close(); err == nil {
			err = cerr
		}
		done <- err
	}()
	return done
}

// A resumable link whose connections all die, again and again, while
// data flows both ways through an echo, delivers every byte once and in
// order, and neither end sees an error; with every option.
func TestLinkResume(t *testing.T) {
	for _, m := range []vconn.Method{vconn.Direct, vconn.Routed} {
		t.Run(string(m), func(t *testing.T) {
			a, b := site(t, m)
			l, err := Listen(b, 7000, ListenOptions{AllowPlain: true})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for _, o := range []Options{{}, {Plain: true}, {Streams: 3, Compression: CompressAuto}} {
				o.Resume = true
				o.Config.ResendBuffer = 4 << 20
				t.Run(fmt.Sprintf("streams=%d,compress=%s,plain=%v", o.Streams, o.Compression, o.Plain), func(t *testing.T) {
					served := echoBack(l)
					c := dial(t, a, "b:7000", o)
					if !c.Resumable() || c.Stats().Window != 4<<20 {
						t.Fatalf("resumable %v, window %d", c.Resumable(), c.Stats().Window)
					}
					data := TextData(3, 24<<20)
					readDone := make(chan struct{})
					got := make(chan readResult, 1)
					go func() {
						res := <-readAll(c)
						close(readDone)
						got <- res
					}()
					sent := make(chan error, 1)
					go func() {
						for p := data; len(p) > 0; {
							k := min(len(p), 1<<20)
							if _, err := c.Write(p[:k]); err != nil {
								sent <- err
								return
							}
							p = p[k:]
						}
						sent <- c.CloseWrite()
					}()
					cuts := 0
					for range ncuts {
						// wait for some bytes to come back, then cut
						before := c.r.Stats().Delivered
					progress:
						for c.r.Stats().Delivered == before {
							select {
							case <-readDone:
								break progress
							case <-time.After(5 * time.Millisecond):
							}
						}
						cuts += cutAll(c)
					}
					if err := wait(t, sent, "sending"); err != nil {
						select {
						case serr := <-served:
							t.Logf("the acceptor's end: %v", serr)
						case <-time.After(time.Second):
						}
						t.Fatalf("write: %v", err)
					}
					res := wait(t, got, "reading")
					if res.err != nil {
						t.Fatalf("read: %v", res.err)
					}
					sameData(t, res.data, data)
					if err := c.Close(); err != nil {
						t.Errorf("close: %v", err)
					}
					if err := wait(t, served, "the echo"); err != nil {
						t.Errorf("the acceptor's end: %v", err)
					}
					ws, rs := c.w.Stats(), c.r.Stats()
					t.Logf("%d connections cut; resent %d blocks, %d duplicates dropped, kept up to %d, held up to %d",
						cuts, ws.Resent, rs.Duplicates, ws.MaxKept, rs.MaxBuffered)
					if ws.MaxKept > 4<<20 || rs.MaxBuffered > 4<<20 {
						t.Errorf("kept %d, held %d: beyond the window", ws.MaxKept, rs.MaxBuffered)
					}
				})
			}
		})
	}
}

var ncuts = 4

var errPathCut = errors.New("path cut by the test")

// A resumable link's only path is cut: within ResumeTimeout it resumes
// when the path is back; cut for longer, both ends fail with a LostError
// naming the connection, how and when it died (and, at the dialler, why
// the last redial failed).
func TestLinkResumeTimeout(t *testing.T) {
	a, b := site(t, vconn.Direct)
	const limit = 5 * time.Second
	l, err := Listen(b, 7000, ListenOptions{Config: Config{ResumeTimeout: limit}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var cut atomic.Bool
	o := Options{Resume: true, Config: Config{ResumeTimeout: limit}, Redial: func(ctx context.Context) (*vconn.Conn, error) {
		if cut.Load() {
			return nil, errPathCut
		}
		return a.DialMachine(ctx, b.Machine(), 7000)
	}}
	for _, outage := range []time.Duration{limit / 5, 0} {
		accepted := make(chan *Conn, 1)
		go func() {
			c, err := l.Accept()
			if err == nil {
				accepted <- c.(*Conn)
			}
		}()
		c := dial(t, a, "b:7000", o)
		s := wait(t, accepted, "accept")
		defer s.Close()
		msg := []byte("before the cut")
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(s, buf); err != nil {
			t.Fatal(err)
		}
		cut.Store(true)
		cutAll(c)
		if outage > 0 {
			time.Sleep(outage)
			cut.Store(false)
			if _, err := c.Write([]byte("after")); err != nil {
				t.Fatalf("write after a %s outage: %v", outage, err)
			}
			_ = s.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.ReadFull(s, buf[:5]); err != nil || string(buf[:5]) != "after" {
				t.Fatalf("after a %s outage the link read %q, %v", outage, buf[:5], err)
			}
			_ = s.SetReadDeadline(time.Time{})
			if err := c.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			continue
		}
		// cut for good
		for end, conn := range map[string]*Conn{"dialler": c, "acceptor": s} {
			_, err := conn.Read(buf)
			var le *LostError
			if !errors.Is(err, ErrLost) || !errors.As(err, &le) || le.Link != c.ID() || le.End != end || le.Err == nil || le.At.IsZero() || le.Timeout != limit {
				t.Fatalf("%s: read on a link cut for good: %v", end, err)
			}
			if end == "dialler" && !errors.Is(le.Redial, errPathCut) {
				t.Errorf("the dialler's LostError does not name the failed redial: %v", err)
			}
			t.Logf("%s: %v", end, err)
		}
		if err := c.Close(); !errors.Is(err, ErrLost) {
			t.Errorf("close of a lost link: %v", err)
		}
	}
}

// refusedJoin sends a resumable join hello for link id with token on a
// new connection from n to b:7000 and returns the error.
func refusedJoin(t *testing.T, n *vconn.Node, id LinkID, token [tokenSize]byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vc, err := n.Dial(ctx, "b:7000")
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	_, err = (&Conn{}).greet(ctx, vc, hello{kind: helloJoin, flags: flagBlocks | flagResume, link: id, token: token})
	return err
}

// Another member of the grid who learns a link's ID (and even its token)
// cannot join it, and the link's own peer cannot join without the right
// token: both are refused, the reason named at both ends, and the link
// goes on.
func TestLinkResumeTakeover(t *testing.T) {
	ns := siteOf(t, []string{"a", "b", "mallory"}, vconn.Direct)
	a, b, mallory := ns[0], ns[1], ns[2]
	var log logs
	l, err := Listen(b, 7000, ListenOptions{Logf: log.logf})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	served := echoBack(l)
	c := dial(t, a, "b:7000", Options{Resume: true})
	testRefusal := func(who string, n *vconn.Node, token [tokenSize]byte, want string) {
		t.Helper()
		err := refusedJoin(t, n, c.ID(), token)
		var re *direct.RefusedError
		if !errors.As(err, &re) || !strings.Contains(re.Reason, want) {
			t.Fatalf("%s joining link %s: %v, want a refusal saying %q", who, c.ID(), err, want)
		}
		testwait.Until(t, "the listener to log "+want, 10*time.Second, func() bool { return log.has(re.Reason) })
	}
	testRefusal("mallory with the token", mallory, c.token, "belongs to another peer")
	wrong := c.token
	wrong[0] ^= 1
	testRefusal("a with a wrong token", a, wrong, "wrong resume token")
	// nor may another open a link of the same ID, which would take its
	// place at the listener (and the link's resumes would be refused)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vc, err := mallory.Dial(ctx, "b:7000")
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&Conn{}).greet(ctx, vc, hello{kind: helloOpen, flags: flagBlocks | flagResume, link: c.ID(), token: [tokenSize]byte{1}, window: minWindow, timeout: 30000})
	vc.Close()
	var re *direct.RefusedError
	if !errors.As(err, &re) || !strings.Contains(re.Reason, "is in use") {
		t.Fatalf("mallory opening a link of a's link's ID: %v", err)
	}
	testwait.Until(t, "the listener to log "+re.Reason, 10*time.Second, func() bool { return log.has(re.Reason) })
	// the link is untouched, and still resumes
	if c.rs.connections() != 1 {
		t.Errorf("the link has %d connections", c.rs.connections())
	}
	cutAll(c)
	roundTrip(t, c, 1<<20)
	if err := wait(t, served, "the echo"); err != nil {
		t.Error(err)
	}
}

// Old peers keep working: a dialler asking for resume from an acceptor
// that predates it gets a link that is not resumable (after a refusal,
// over a new connection), as does one from an acceptor that refuses
// resume; an old dialler, which never asks, gets what it always got.
func TestLinkResumeOldPeers(t *testing.T) {
	a, b := site(t, vconn.Direct)
	old, err := Listen(b, 7000, ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	old.legacy = true
	echo(t, old)
	no, err := Listen(b, 7001, ListenOptions{NoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	defer no.Close()
	echo(t, no)
	for _, addr := range []string{"b:7000", "b:7001"} {
		for _, o := range []Options{{Resume: true}, {Resume: true, Streams: 2}, {Streams: 2}, {}} {
			c := dial(t, a, addr, o)
			if c.Resumable() {
				t.Errorf("%s with %+v: resumable", addr, o)
			}
			roundTrip(t, c, 1<<20)
		}
	}
}

// An end that closes a resumable link while the peer still sends tells
// it so: the peer's Write fails at once with ErrAborted, the
// reason given, instead of waiting for the link to resume (its Read
// still gets the end of what the peer sent).
func TestLinkResumeCloseEarly(t *testing.T) {
	a, b := site(t, vconn.Direct)
	l, err := Listen(b, 7000, ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c := dial(t, a, "b:7000", Options{Resume: true})
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	s := wait(t, accepted, "accept")
	buf := make([]byte, 1)
	if _, err := io.ReadFull(s, buf); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	werr := make(chan error, 1)
	go func() {
		for {
			if _, err := c.Write(make([]byte, 64<<10)); err != nil {
				werr <- err
				return
			}
		}
	}()
	err = wait(t, werr, "the write to fail")
	if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "the peer closed the link") {
		t.Errorf("write to a link the peer closed: %v", err)
	}
	if _, err := c.Read(buf); err != io.EOF {
		t.Errorf("read of a link whose peer closed after sending nothing: %v", err)
	}
}

// A resumable link moves to a connection the caller set up while data
// flows (the seam of the live path upgrade, where the new one would be
// direct and the old routed): Join the new one, close the old one; every
// byte arrives once, in order.
func TestLinkJoinAndDrop(t *testing.T) {
	a, b := site(t, vconn.Routed)
	l, err := Listen(b, 7000, ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	served := echoBack(l)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := dial(t, a, "b:7000", Options{Resume: true})
	data := TextData(5, 8<<20)
	got := readAll(c)
	sent := make(chan error, 1)
	go func() {
		for p := data; len(p) > 0; p = p[min(len(p), 256<<10):] {
			if _, err := c.Write(p[:min(len(p), 256<<10)]); err != nil {
				sent <- err
				return
			}
		}
		sent <- c.CloseWrite()
	}()
	for c.r.Stats().Delivered == 0 {
		time.Sleep(time.Millisecond)
	}
	vc, err := a.DialMachine(ctx, b.Machine(), 7000)
	if err != nil {
		t.Fatal(err)
	}
	first := c.First()
	if err := c.Join(ctx, vc); err != nil {
		t.Fatal(err)
	}
	if n := c.rs.connections(); n != 2 {
		t.Fatalf("%d connections after the join, want 2", n)
	}
	first.Close() // the old path goes
	if err := wait(t, sent, "sending"); err != nil {
		t.Fatal(err)
	}
	res := wait(t, got, "reading")
	if res.err != nil {
		t.Fatal(res.err)
	}
	sameData(t, res.data, data)
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := wait(t, served, "the echo"); err != nil {
		t.Error(err)
	}
	t.Logf("closed in %s; %d blocks sent again", time.Since(start), c.w.Stats().Resent)
}

// The resume timeout is agreed in the hello, as the window is: each end
// proposes its own and both use the smaller, so that a dialler's short
// limit (gridlink cp --resume-timeout) fails both ends in time, and a
// dialler's long one does not keep an acceptor waiting beyond its own.
func TestLinkResumeTimeoutAgreed(t *testing.T) {
	a, b := site(t, vconn.Direct)
	for _, c := range []struct{ dialler, acceptor, want time.Duration }{
		{time.Second, 0, time.Second},                         // the acceptor's default 30 s
		{0, 1500 * time.Millisecond, 1500 * time.Millisecond}, // the dialler's default 30 s
		{time.Minute, 1200 * time.Millisecond, 1200 * time.Millisecond},
	} {
		l, err := Listen(b, 0, ListenOptions{Config: Config{ResumeTimeout: c.acceptor}})
		if err != nil {
			t.Fatal(err)
		}
		var cut atomic.Bool
		o := Options{Resume: true, Config: Config{ResumeTimeout: c.dialler}, Redial: func(ctx context.Context) (*vconn.Conn, error) {
			if cut.Load() {
				return nil, errPathCut
			}
			return a.DialMachine(ctx, b.Machine(), l.Addr().(vconn.Addr).Port)
		}}
		accepted := make(chan *Conn, 1)
		go func() {
			if c, err := l.Accept(); err == nil {
				accepted <- c.(*Conn)
			}
		}()
		d := dial(t, a, fmt.Sprintf("b:%d", l.Addr().(vconn.Addr).Port), o)
		s := wait(t, accepted, "accept")
		for end, conn := range map[string]*Conn{"dialler": d, "acceptor": s} {
			if got := conn.Stats().ResumeTimeout; got != c.want {
				t.Errorf("%v against %v: the %s's link has a resume timeout of %v, want %v", c.dialler, c.acceptor, end, got, c.want)
			}
		}
		cut.Store(true)
		cutAll(d)
		for end, conn := range map[string]*Conn{"dialler": d, "acceptor": s} {
			_, err := conn.Read(make([]byte, 1))
			var le *LostError
			if !errors.As(err, &le) || le.Timeout != c.want {
				t.Errorf("%s: %v, want a LostError after %v", end, err, c.want)
			}
		}
		d.Close()
		s.Close()
		l.Close()
	}
}
