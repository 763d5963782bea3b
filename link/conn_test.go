package link

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

// site runs a hub on loopback and two nodes attached to it, a and b,
// which set up connections by the given methods only (all if none).
func site(t testing.TB, methods ...vconn.Method) (a, b *vconn.Node) {
	t.Helper()
	ns := siteOf(t, []string{"a", "b"}, methods...)
	return ns[0], ns[1]
}

// siteOf is site with nodes of the given names; the first resolves the
// others before it returns.
func siteOf(t testing.TB, names []string, methods ...vconn.Method) []*vconn.Node {
	t.Helper()
	key, _ := identity.NewKey()
	creds, _ := pki.NewCredentials(key)
	h, err := hubserver.New(hubserver.Config{Name: "site", Creds: creds, Listen: "127.0.0.1:0", Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	start := func(name string) *vconn.Node {
		n, err := vconn.Start(context.Background(), vconn.Config{Name: name, Methods: methods, ListenAddr: "127.0.0.1",
			Hubs: []string{h.Addr().String()}, HeadStart: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	var ns []*vconn.Node
	for _, name := range names {
		ns = append(ns, start(name))
	}
	var rerr error
	defer func() {
		if t.Failed() {
			t.Logf("%s resolving the others: %v", names[0], rerr)
		}
	}()
	for _, name := range names[1:] {
		testwait.Until(t, names[0]+" to resolve "+name, 10*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, rerr = ns[0].Resolve(ctx, identity.Addr{Node: name})
			return rerr == nil
		})
	}
	return ns
}

// echo serves links on l that send back what they read, then half-close.
func echo(t *testing.T, l *Listener) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := io.Copy(c, c); err != nil {
					t.Logf("echo: %v", err)
					return
				}
				_ = c.(*Conn).CloseWrite()
			}()
		}
	}()
}

// roundTrip sends size bytes of text over c, half-closes, and checks the
// echo and the EOF after it.
func roundTrip(t *testing.T, c *Conn, size int) {
	t.Helper()
	data := TextData(7, size)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.CloseWrite()
		}
		errc <- err
	}()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("%s: reading the echo: %v", c, err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("%s: sending: %v", c, err)
	}
	if sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("%s: %d bytes came back as %d different bytes", c, size, len(got))
	}
}

func dial(t testing.TB, a *vconn.Node, addr string, o Options) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, a, addr, o)
	if err != nil {
		t.Fatalf("dial %s with %+v: %v", addr, o, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Every option composes with every other.
func TestLinkOptions(t *testing.T) {
	a, b := site(t)
	l, err := Listen(b, 7000, ListenOptions{AllowPlain: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	echo(t, l)
	for _, streams := range []int{1, 3, Auto} {
		for _, comp := range []Compression{CompressOff, CompressS2, CompressAuto} {
			for _, plain := range []bool{false, true} {
				o := Options{Streams: streams, Compression: comp, Plain: plain}
				t.Run(fmt.Sprintf("streams=%d,compress=%s,plain=%v", streams, comp, plain), func(t *testing.T) {
					c := dial(t, a, "b:7000", o)
					if c.Encrypted() == plain {
						t.Errorf("Encrypted() = %v with plain %v", c.Encrypted(), plain)
					}
					if want := max(streams, 1); streams != Auto && c.Stats().Streams != want {
						t.Errorf("%d streams, want %d", c.Stats().Streams, want)
					}
					roundTrip(t, c, 4<<20)
				})
			}
		}
	}
}

// Links work whatever method set up their connections.
func TestLinkOverEachMethod(t *testing.T) {
	for _, m := range []vconn.Method{vconn.Direct, vconn.Reverse, vconn.Splice, vconn.Routed} {
		t.Run(string(m), func(t *testing.T) {
			a, b := site(t, m)
			l, err := Listen(b, 7000, ListenOptions{AllowPlain: true})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			echo(t, l)
			for _, o := range []Options{{}, {Plain: true}, {Streams: 3, Compression: CompressAuto}, {Streams: 2, Plain: true}} {
				c := dial(t, a, "b:7000", o)
				if c.Method() != m {
					t.Errorf("method %s, want %s", c.Method(), m)
				}
				roundTrip(t, c, 2<<20)
			}
		})
	}
}

// A listener that does not allow plain refuses it, saying why; one that
// bounds the streams refuses the joins beyond, and the link goes on with
// those it has.
func TestLinkPolicy(t *testing.T) {
	a, b := site(t, vconn.Direct)
	l, err := Listen(b, 7000, ListenOptions{MaxStreams: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	echo(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = Dial(ctx, a, "b:7000", Options{Plain: true})
	var re *direct.RefusedError
	if !errors.Is(err, direct.ErrRefused) || !errors.As(err, &re) || re.What != direct.RefusedLink || !strings.Contains(re.Reason, "accepts only encrypted links") || !strings.Contains(err.Error(), "accepts only encrypted links") {
		t.Errorf("plain to a listener that does not allow it: %v", err)
	}
	c := dial(t, a, "b:7000", Options{Streams: 4})
	if st := c.Stats(); st.Streams != 2 || !strings.Contains(st.JoinError, "the most this listener allows") {
		t.Errorf("4 streams to a listener allowing 2: %d streams, join error %q", st.Streams, st.JoinError)
	}
	roundTrip(t, c, 2<<20)

	// A link dialled to a port without a listener is refused by vconn.
	if _, err := Dial(ctx, a, "b:7001", Options{Streams: 2}); !errors.Is(err, direct.ErrRefused) || !errors.As(err, &re) || re.What == direct.RefusedLink {
		t.Errorf("dial to a closed port: %v", err)
	}
}

// A stream that dies mid-transfer surfaces as an error at the other end,
// never as a short stream.
func TestLinkStreamDies(t *testing.T) {
	a, b := site(t, vconn.Direct)
	l, err := Listen(b, 7000, ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(io.Discard, c)
		got <- err
	}()
	c := dial(t, a, "b:7000", Options{Streams: 3})
	buf := TextData(1, 1<<20)
	for range 4 {
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	victim := c.conns[1]
	c.mu.Unlock()
	victim.Close() // as a network failure would
	for range 64 {
		if _, err := c.Write(buf); err != nil {
			break
		}
	}
	select {
	case err := <-got:
		if err == nil || !strings.Contains(err.Error(), "stream") {
			t.Fatalf("the acceptor read to the end of a link that lost a stream (err %v)", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the acceptor did not notice the lost stream")
	}
}

// A connection that is not a link is refused with a clear reason, and the
// listener goes on serving.
func TestLinkBadHello(t *testing.T) {
	a, b := site(t, vconn.Direct)
	l, err := Listen(b, 7000, ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	echo(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vc, err := a.Dial(ctx, "b:7000")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vc.Write([]byte("GET / HTTP/1.1\r\nHost: b\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = vc.SetReadDeadline(time.Now().Add(10 * time.Second))
	r, err := readReply(vc)
	if err != nil || r.status != replyRefused || !strings.Contains(r.reason, "magic") {
		t.Errorf("reply to a non-link: %+v, %v", r, err)
	}
	vc.Close()
	roundTrip(t, dial(t, a, "b:7000", Options{Streams: 2}), 1<<20)
	var _ net.Listener = l
}
