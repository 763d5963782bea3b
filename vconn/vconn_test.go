package vconn

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki"
)

// testHub runs a hub on loopback for the rest of the test.
func testHub(t *testing.T, name string, peers ...string) *hubserver.Hub {
	t.Helper()
	key, _ := identity.NewKey()
	creds, _ := pki.NewCredentials(key)
	h, err := hubserver.New(hubserver.Config{Name: name, Creds: creds, Listen: "127.0.0.1:0", Peers: peers, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

func testNode(t *testing.T, name string, h *hubserver.Hub, methods ...Method) *Node {
	t.Helper()
	// a long head start: these tests check which method wins, not timing,
	// and must hold on a machine loaded by parallel test packages.
	cfg := Config{Name: name, Methods: methods, ListenAddr: "127.0.0.1", HeadStart: 200 * time.Millisecond}
	if h != nil {
		cfg.Hubs = []string{h.Addr().String()}
	}
	n, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// serveEcho echoes on port and counts accepted connections.
func serveEcho(t *testing.T, n *Node, port uint16) *atomic.Int32 {
	t.Helper()
	l, err := n.Listen(port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() { defer c.Close(); _, _ = io.Copy(c, c); c.(*Conn).CloseWrite() }()
		}
	}()
	return &accepted
}

// echoCheck sends size bytes through an echo connection, half-closes and
// verifies the echo and the EOF after it.
func echoCheck(t *testing.T, c net.Conn, size int) {
	t.Helper()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.(*Conn).CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read echo: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("echo of %d bytes came back as %d different bytes", size, len(got))
	}
}

func waitResolvable(t *testing.T, n *Node, name string) {
	t.Helper()
	var err error
	defer func() {
		if t.Failed() {
			t.Logf("%s resolving %s: %v", n.Name(), name, err)
		}
	}()
	testwait.Until(t, n.Name()+" to resolve "+name, 10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = n.Resolve(ctx, identity.Addr{Node: name})
		return err == nil
	})
}

func TestEachMethod(t *testing.T) {
	h := testHub(t, "site")
	for _, m := range []Method{Direct, Reverse, Splice, Routed} {
		t.Run(string(m), func(t *testing.T) {
			a := testNode(t, "a-"+string(m), h, m)
			b := testNode(t, "b-"+string(m), h, m)
			accepted := serveEcho(t, b, 7000)
			waitResolvable(t, a, b.Name())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := a.Dial(ctx, b.Name()+":7000")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.Method() != m {
				t.Errorf("method %s, want %s", c.Method(), m)
			}
			if c.Peer().ID != b.ID() || c.RemoteAddr().String() != b.Name()+":7000" {
				t.Errorf("peer %v remote %v", c.Peer(), c.RemoteAddr())
			}
			echoCheck(t, c, 3<<20)
			// nothing listens on 7001: refused, fast, whatever the method.
			start := time.Now()
			_, err = a.Dial(ctx, b.Name()+":7001")
			if !errors.Is(err, direct.ErrRefused) || !strings.Contains(err.Error(), "no listener on port 7001") {
				t.Errorf("dial to a closed port: %v", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("refusal took %v", d)
			}
			if n := accepted.Load(); n != 1 {
				t.Errorf("listener accepted %d connections, want 1", n)
			}
		})
	}
}

// With every method enabled the race picks the most direct one, caches it
// per site, and the losers never reach the accepting application.
func TestRaceAndCache(t *testing.T) {
	h := testHub(t, "site")
	a := testNode(t, "a", h)
	b := testNode(t, "b", h)
	accepted := serveEcho(t, b, 7000)
	waitResolvable(t, a, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 5; i++ {
		c, err := a.Dial(ctx, "b:7000")
		if err != nil {
			t.Fatal(err)
		}
		if c.Method() != Direct {
			t.Errorf("dial %d: method %s, want direct", i, c.Method())
		}
		echoCheck(t, c, 1000)
		c.Close()
	}
	if got := a.CachedMethods()[b.Machine().Hub]; got != Direct {
		t.Errorf("cache for the hub: %q", got)
	}
	time.Sleep(200 * time.Millisecond) // losers would show up by now (nothing more happens, on real sockets)
	if n := accepted.Load(); n != 5 {
		t.Errorf("listener accepted %d connections for 5 dials", n)
	}
}

// Without any direct path (b's listener unreachable: no addresses), the
// race settles on routed; with reverse possible it prefers reverse.
func TestFallback(t *testing.T) {
	h := testHub(t, "site")
	a := testNode(t, "a", h, Reverse, Routed)
	b := testNode(t, "b", h, Routed)
	serveEcho(t, b, 7000)
	waitResolvable(t, a, "b")
	c, err := a.Dial(context.Background(), "b:7000")
	if err != nil {
		t.Fatal(err)
	}
	if c.Method() != Reverse {
		t.Errorf("method %s, want reverse (b can call a back)", c.Method())
	}
	echoCheck(t, c, 100000)
}

func TestBadAddresses(t *testing.T) {
	h := testHub(t, "site")
	a := testNode(t, "a", h)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for addr, want := range map[string]string{
		"nobody:7000":  `nobody`,
		"b:":           "no port",
		"b":            "no port",
		"b:gopher":     `unknown service "gopher"`,
		"x y:1":        "bad address",
		"b:7000@other": "",
	} {
		_, err := a.Dial(ctx, addr)
		if err == nil || (want != "" && !strings.Contains(err.Error(), want)) {
			t.Errorf("Dial(%q): %v, want %q", addr, err, want)
		}
	}
}

func TestRequest(t *testing.T) {
	for _, r := range []request{{port: 1}, {port: 65535}, {reverse: true, token: 0}, {reverse: true, token: 1<<64 - 1}, {splice: true, token: 0xbeef}, {spare: true}} {
		got, err := parseRequest(r.String())
		if err != nil || got != r {
			t.Errorf("round trip %v: %v %v", r, got, err)
		}
	}
	for _, bad := range []string{"", "c", "c0", "c070", "c65536", "r", "rG", "r+1", "y1", "x", "xg", "s1", "r0001", strings.Repeat("r1", 9)} {
		if _, err := parseRequest(bad); err == nil {
			t.Errorf("parseRequest(%q) accepted", bad)
		}
	}
}

func FuzzRequest(f *testing.F) {
	f.Add("c7000")
	f.Add("r1f")
	f.Add("x1f")
	f.Add("s")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseRequest(s)
		if err != nil {
			return
		}
		if r.String() != s {
			t.Fatalf("%q parsed as %+v, prints as %q", s, r, r.String())
		}
	})
}

// A virtual address may name a node by one of its IP addresses; the hubs
// resolve it like a name.
func TestDialByAddress(t *testing.T) {
	h := testHub(t, "site")
	a := testNode(t, "a", h)
	b, err := Start(context.Background(), Config{Name: "b", Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.2", HeadStart: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	serveEcho(t, b, 7000)
	waitResolvable(t, a, "127.0.0.2")
	c, err := a.Dial(context.Background(), "127.0.0.2:7000")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Peer().ID != b.ID() {
		t.Errorf("127.0.0.2 resolved to %v, want b", c.Peer())
	}
	echoCheck(t, c, 1000)
	if _, err := a.Dial(context.Background(), "127.0.0.9:7000"); err == nil || !strings.Contains(err.Error(), `lookup 127.0.0.9: node not found`) {
		t.Errorf("an address no node has: %v", err)
	}
}
