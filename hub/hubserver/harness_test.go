package hubserver

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/memnet"
	"github.com/gridlink/gridlink/pki"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		runHelper()
		return
	}
	if os.Getenv(scaleNodesEnv) != "" {
		runScaleNodes() // scale_nodes_test.go
		return
	}
	labtest.Main(m)
}

const testInterval = 100 * time.Millisecond

// creds makes fresh credentials.
func creds(t testing.TB) *pki.Credentials {
	t.Helper()
	k, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	c, err := pki.NewCredentials(k)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testLogf logs to t until the test ends, then nowhere.
func testLogf(t testing.TB, prefix string) func(string, ...any) {
	var done atomic.Bool
	t.Cleanup(func() { done.Store(true) })
	return func(format string, args ...any) {
		if !done.Load() {
			t.Logf(prefix+format, args...)
		}
	}
}

// grid is a set of in-process hubs on loopback with a firewall between
// them: a blocked pair cannot dial each other.
type grid struct {
	t       testing.TB
	mu      sync.Mutex
	hubs    map[string]*testHub
	blocked map[[2]string]bool // pairs of hub names that cannot dial each other
	// splice lets blocked hubs splice links (on loopback the test's
	// firewall cannot stop a splice); off, so blocked pairs stay unlinked.
	splice bool
	// mem, if set, is the network the hubs and nodes use instead of
	// loopback TCP (memGrid).
	mem *memnet.Network
	// lanes is every hub's Config.Lanes (lanes.go); 0: by round trip
	// (one connection on loopback).
	lanes int
	// logged keeps every hub's log lines.
	logged logCounter
	// hosts puts hubs and nodes on other hosts than loopback's (memGrid
	// only): the address the connections of the one of that name come
	// from (onHost, see hostscope.go).
	hosts map[string]netip.Addr
}

type testHub struct {
	*Hub
	name     string
	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
}

func newGrid(t testing.TB) *grid {
	return &grid{t: t, hubs: map[string]*testHub{}, blocked: map[[2]string]bool{}}
}

// memGrid is a grid on an in-memory network (internal/memnet), for a
// test in a synctest bubble: its hubs and nodes block only on channels,
// so time is synthetic. Call it first in the bubble: its cleanup runs
// last and lets the trunks' closing goroutines (CloseAfterFlush) end
// before the bubble does.
func memGrid(t *testing.T) *grid {
	t.Cleanup(func() { time.Sleep(time.Minute) })
	g := newGrid(t)
	g.mem = &memnet.Network{}
	return g
}

// dial reaches a hub: in memory on a memGrid, else loopback TCP.
func (g *grid) dial(ctx context.Context, spec string) (net.Conn, error) {
	if g.mem != nil {
		return g.mem.Dial(ctx, spec)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", spec)
}

// dialAs is dial for the hub or node name: from its host (g.hosts) on a
// memGrid.
func (g *grid) dialAs(name string) func(context.Context, string) (net.Conn, error) {
	g.mu.Lock()
	from, ok := g.hosts[name]
	g.mu.Unlock()
	if !ok || g.mem == nil {
		return g.dial
	}
	return func(ctx context.Context, spec string) (net.Conn, error) { return g.mem.DialFrom(ctx, from, spec) }
}

// hub starts a hub that dials the named peers (started before).
func (g *grid) hub(name string, peers ...string) *testHub {
	g.t.Helper()
	return g.hubWith(name, creds(g.t), peers...)
}

// hubWith starts a hub of credentials cr that dials the named peers.
func (g *grid) hubWith(name string, cr *pki.Credentials, peers ...string) *testHub {
	g.t.Helper()
	var specs []string
	for _, p := range peers {
		specs = append(specs, g.get(p).Addr().String())
	}
	var ln net.Listener
	if g.mem != nil {
		l, err := g.mem.Listen("127.0.0.1:0")
		if err != nil {
			g.t.Fatal(err)
		}
		ln = l
	}
	h, err := New(Config{
		Name:     name,
		Creds:    cr,
		Listen:   "127.0.0.1:0",
		Listener: ln,
		Peers:    specs,
		Interval: testInterval,
		Logf:     g.hubLogf(),
		NoSplice: !g.splice,
		Lanes:    g.lanes,
		Dial: func(ctx context.Context, spec string) (net.Conn, error) {
			g.mu.Lock()
			blocked := false
			for to, th := range g.hubs {
				if th.Addr().String() == spec && g.blocked[[2]string{name, to}] {
					blocked = true
				}
			}
			g.mu.Unlock()
			if blocked {
				return nil, fmt.Errorf("dial %s: blocked by the test firewall", spec)
			}
			return g.dialAs(name)(ctx, spec)
		},
	})
	if err != nil {
		g.t.Fatal(err)
	}
	return g.serve(name, h)
}

// hubLogf logs a hub's lines to the test and keeps them in g.logged.
func (g *grid) hubLogf() func(string, ...any) {
	tl := testLogf(g.t, "")
	return func(f string, a ...any) {
		g.logged.logf(f, a...)
		tl(f, a...)
	}
}

// serve runs hub h as the grid's hub name.
func (g *grid) serve(name string, h *Hub) *testHub {
	ctx, cancel := context.WithCancel(context.Background())
	th := &testHub{Hub: h, name: name, cancel: cancel, done: make(chan error, 1)}
	go func() { th.done <- h.Serve(ctx) }()
	g.t.Cleanup(th.stop)
	g.mu.Lock()
	g.hubs[name] = th
	g.mu.Unlock()
	return th
}

func (th *testHub) stop() {
	th.stopOnce.Do(func() {
		th.cancel()
		select {
		case <-th.done:
		case <-time.After(10 * time.Second):
			pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
			panic("hub " + th.name + " did not stop")
		}
	})
}

// crash kills the hub abruptly: its sockets close at once, with no word
// to anyone, as when its process dies.
func (th *testHub) crash() {
	th.vanish.Store(true)
	th.ln.Close()
	th.mu.Lock()
	// first silence every link, so that no goroutine reacting to one
	// closed socket gets a word out through another still open.
	for p := range th.all {
		p.t.Mute()
		for _, l := range p.extraLanes() {
			l.t.Mute()
		}
	}
	for p := range th.all {
		p.t.Conn().Close()
		for _, l := range p.extraLanes() {
			l.t.Conn().Close()
		}
	}
	th.mu.Unlock()
	th.stop()
}

func (g *grid) get(name string) *testHub {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.hubs[name]
	if h == nil {
		g.t.Fatalf("no hub %s", name)
	}
	return h
}

// block keeps hubs a and b from dialling each other (call it before
// starting them).
func (g *grid) block(a, b string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.blocked[[2]string{a, b}] = true
	g.blocked[[2]string{b, a}] = true
}

// node attaches a node to the named hubs, in order.
func (g *grid) node(name string, hubs ...string) *hub.Session {
	g.t.Helper()
	var specs []string
	for _, h := range hubs {
		specs = append(specs, g.get(h).Addr().String())
	}
	return attachNodeDial(g.t, g.dialAs(name), name, specs...)
}

func attachNode(t testing.TB, name string, specs ...string) *hub.Session {
	t.Helper()
	return attachNodeDial(t, nil, name, specs...)
}

// attachNodeDial attaches a node that reaches its hubs with dial (nil:
// loopback TCP).
func attachNodeDial(t testing.TB, dial func(context.Context, string) (net.Conn, error), name string, specs ...string) *hub.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := hub.Attach(ctx, hub.SessionConfig{Creds: creds(t), Machine: identity.Machine{Name: name}, Hubs: specs, Logf: testLogf(t, ""), Dial: dial})
	if err != nil {
		t.Fatalf("attach %s: %v", name, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func (th *testHub) route(to *testHub) (Route, bool) {
	for _, r := range th.Routes() {
		if r.Hub == to.ID() {
			return r, true
		}
	}
	return Route{}, false
}

// serve accepts circuits on port with fn, refusing other ports the way a
// node without a listener does.
func serve(s *hub.Session, port uint16, fn func(*hub.Circuit)) {
	go func() {
		for in := range s.Incoming() {
			if in.Open.Port != port {
				in.Refuse(fmt.Sprintf("connection refused: no listener on port %d at %s", in.Open.Port, s.Machine().Name))
				continue
			}
			if err := in.Accept(); err != nil {
				continue
			}
			go fn(in.Circuit)
		}
	}()
}

// stream is deterministic pseudo-random data.
type stream struct{ r *rand.ChaCha8 }

func newStream(seed byte) *stream {
	var s [32]byte
	s[0] = seed
	return &stream{rand.NewChaCha8(s)}
}

func (s *stream) Read(p []byte) (int, error) { return s.r.Read(p) }

// sendHash writes n bytes of stream seed to w and returns their sha256.
func sendHash(w io.Writer, seed byte, n int64) ([32]byte, error) {
	h := sha256.New()
	_, err := io.CopyBuffer(io.MultiWriter(w, h), io.LimitReader(newStream(seed), n), make([]byte, 48<<10))
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, err
}

// recvHash reads r to EOF and returns the byte count and sha256.
func recvHash(r io.Reader) (int64, [32]byte, error) {
	h := sha256.New()
	n, err := io.CopyBuffer(h, r, make([]byte, 40<<10))
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return n, sum, err
}

func expectErr(t testing.TB, err error, target error, text string) {
	t.Helper()
	if err == nil || (target != nil && !errors.Is(err, target)) || !strings.Contains(err.Error(), text) {
		t.Fatalf("error %v; want %v containing %q", err, target, text)
	}
}
