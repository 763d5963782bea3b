package hubserver

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/status"
	"github.com/gridlink/gridlink/wire"
)

// line builds A-B-C: A dials B, B dials C, A and C cannot reach each
// other.
func line(t *testing.T) (*grid, *testHub, *testHub, *testHub) {
	g := newGrid(t)
	g.block("a", "c")
	c := g.hub("c")
	b := g.hub("b", "c")
	a := g.hub("a", "b")
	testwait.Until(t, "routes between A and C", 10*time.Second, func() bool {
		r1, ok1 := a.route(c)
		r2, ok2 := c.route(a)
		return ok1 && ok2 && r1.Reachable() && r2.Reachable()
	})
	return g, a, b, c
}

func TestLineRoutesAndCircuit(t *testing.T) {
	g, a, b, c := line(t)
	r, _ := a.route(c)
	if r.Hops != 2 || r.NextHop != b.ID() || r.Name != "c" || r.State%2 != 0 || len(r.Addrs) != 1 {
		t.Fatalf("A's route to C: %+v; want 2 hops via B (%s)", r, b.ID().Short())
	}
	if r, _ := c.route(a); r.Hops != 2 || r.NextHop != b.ID() {
		t.Fatalf("C's route to A: %+v", r)
	}
	if r, _ := a.route(b); r.Hops != 1 || r.NextHop != b.ID() || r.Latency <= 0 {
		t.Fatalf("A's route to B: %+v", r)
	}
	links := b.Links()
	if len(links) != 2 || links[0].Role != "hub" || links[1].Role != "hub" {
		t.Fatalf("B's links: %+v", links)
	}
	for _, l := range links {
		if want := l.Name == "c"; l.Dialed != want {
			t.Errorf("B's link to %s: dialled=%v", l.Name, l.Dialed)
		}
	}

	na := g.node("na", "a")
	nc := g.node("nc", "c")
	if na.Hub().ID != a.ID() || na.Hub().Name != "a" || !na.Observed().IsValid() {
		t.Fatalf("na's hub %+v, observed %v", na.Hub(), na.Observed())
	}
	testwait.Until(t, "C to count its node", 5*time.Second, func() bool { r, _ := a.route(c); return r.Nodes == 1 })

	ms, err := na.Lookup(context.Background(), "nc")
	if err != nil || len(ms) != 1 || ms[0].ID != nc.Machine().ID || ms[0].Hub != c.ID() || ms[0].HubName != "c" || len(ms[0].Observed) == 0 {
		t.Fatalf("lookup nc: %+v, %v", ms, err)
	}
	const size = 32 << 20
	type result struct {
		n   int64
		sum [32]byte
		err error
	}
	atC := make(chan result, 2)
	serve(nc, 7000, func(cc *hub.Circuit) {
		defer cc.Close()
		// Reverse direction: half before A finishes, half after.
		var wg sync.WaitGroup
		var sendErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, sendErr = sendHash(cc, 2, size/2)
		}()
		n, sum, err := recvHash(cc) // until A's CloseWrite
		atC <- result{n, sum, err}
		wg.Wait()
		if sendErr == nil {
			_, sendErr = sendHash(cc, 3, size/2) // after A's EOF: the reverse direction still works
		}
		if sendErr == nil {
			sendErr = cc.CloseWrite()
		}
		atC <- result{err: sendErr}
	})

	cir, err := na.Open(context.Background(), ms[0], 7000)
	if err != nil {
		t.Fatal(err)
	}
	defer cir.Close()
	if cir.RemoteAddr().String() != "nc:7000@c" || cir.LocalAddr().Network() != "gridlink" {
		t.Errorf("addresses %s -> %s", cir.LocalAddr(), cir.RemoteAddr())
	}
	recvDone := make(chan result, 1)
	go func() {
		n, sum, err := recvHash(cir)
		recvDone <- result{n, sum, err}
	}()
	sent, err := sendHash(cir, 1, size)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if err := cir.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := cir.Write([]byte("x")); err == nil {
		t.Error("Write after CloseWrite worked")
	}
	got := <-atC
	if got.err != nil || got.n != size || got.sum != sent {
		t.Fatalf("C received %d bytes (%v), hash match %v", got.n, got.err, got.sum == sent)
	}
	back := <-atC
	if back.err != nil {
		t.Fatalf("C's sending: %v", back.err)
	}
	rd := <-recvDone
	want := concatHash(t, []byte{2, 3}, size/2)
	if rd.err != nil || rd.n != size || rd.sum != want {
		t.Fatalf("A received %d bytes (%v), hash match %v", rd.n, rd.err, rd.sum == want)
	}
	// Each hub on the way counted the circuit and its bytes, both ways.
	for _, h := range []*testHub{a, b, c} {
		if got := h.Counters(); got.SwitchedBytes < 2*size || got.CircuitsOpened < 1 {
			t.Errorf("hub %s counted %d bytes switched, %d circuits; want at least %d, 1", h.name, got.SwitchedBytes, got.CircuitsOpened, 2*size)
		}
	}
	// Both sides finished: the hubs forget the circuit.
	testwait.Until(t, "hubs to drop the finished circuit", 5*time.Second, func() bool {
		for _, h := range []*testHub{a, b, c} {
			for _, l := range h.Links() {
				if l.Circuits != 0 {
					return false
				}
			}
		}
		return true
	})
}

// concatHash is the sha256 of the streams of seeds, n bytes each.
func concatHash(t *testing.T, seeds []byte, n int64) [32]byte {
	var rs []io.Reader
	for _, s := range seeds {
		rs = append(rs, io.LimitReader(newStream(s), n))
	}
	_, sum, err := recvHash(io.MultiReader(rs...))
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func TestRefusals(t *testing.T) {
	g, a, _, c := line(t)
	na := g.node("na", "a")
	nc := g.node("nc", "c")
	serve(nc, 7000, func(cc *hub.Circuit) { cc.Close() })
	ctx := context.Background()

	target := nc.Machine()
	cir, err := na.Open(ctx, target, 7001)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cir.Read(make([]byte, 1))
	expectErr(t, err, direct.ErrRefused, "connection refused: no listener on port 7001 at nc")
	if strings.Count(err.Error(), "connection refused") != 1 {
		t.Errorf("refusal %q repeats itself", err)
	}
	if _, err := cir.Write([]byte("x")); !errors.Is(err, direct.ErrRefused) {
		t.Errorf("Write after refusal: %v", err)
	}
	cir.Close()

	// A node that is not attached to C.
	ghost := target
	ghost.ID = creds(t).Key.ID()
	cir, _ = na.Open(ctx, ghost, 7000)
	_, err = cir.Read(make([]byte, 1))
	expectErr(t, err, hub.ErrUnreachable, "node "+ghost.ID.Short()+" is not attached to hub c")
	wantRefused(t, c.Hub, "circuit", status.RefusedNotAttached)
	if errors.Is(err, direct.ErrRefused) {
		t.Error("an unreachable target reads as refused")
	}

	// A hub nobody knows.
	nowhere := target
	nowhere.Hub = creds(t).Key.ID()
	cir, _ = na.Open(ctx, nowhere, 7000)
	_, err = cir.Read(make([]byte, 1))
	expectErr(t, err, hub.ErrUnreachable, "hub a: no route to hub "+nowhere.Hub.Short())
	wantRefused(t, a.Hub, "circuit", status.RefusedNoRoute)

	if _, err := na.Lookup(ctx, "nobody"); !errors.Is(err, hub.ErrNotFound) {
		t.Errorf("lookup nobody: %v", err)
	}
	// Lookup by ID text.
	ms, err := na.Lookup(ctx, target.ID.String())
	if err != nil || len(ms) != 1 || ms[0].Hub != c.ID() {
		t.Errorf("lookup by ID: %+v %v", ms, err)
	}
}

// Routed messages reach a node at another hub; a reverse request for a
// node nobody has comes back as a failure.
func TestRoutedMessages(t *testing.T) {
	g, _, _, c := line(t)
	na := g.node("na", "a")
	nc := g.node("nc", "c")
	ctx := context.Background()
	rev := &wire.Message{Kind: wire.KReverse, Reverse: &wire.Reverse{Token: 7, From: na.Machine(), Port: 80, Target: nc.Machine().ID}}
	if err := na.Send(ctx, c.ID(), nc.Machine().ID, rev); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-nc.Messages():
		if m.Msg.Kind != wire.KReverse || m.FromNode != na.Machine().ID || m.FromHub != g.get("a").ID() || m.Msg.Reverse.Token != 7 {
			t.Fatalf("got %+v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reverse request not delivered")
	}
	ghost := creds(t).Key.ID()
	if err := na.Send(ctx, c.ID(), ghost, rev); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-na.Messages():
		if m.Msg.Kind != wire.KReverseFail || m.Msg.Fail.Token != 7 || !strings.Contains(m.Msg.Fail.Reason, "is not attached to hub c") {
			t.Fatalf("got %+v %+v", m, m.Msg.Fail)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no reverse failure")
	}
	// A message the hub would not accept is refused locally.
	if err := na.Send(ctx, c.ID(), ghost, &wire.Message{Kind: wire.KHello}); err == nil {
		t.Error("sending a bodiless hello worked")
	}
}

// Two hubs that dial each other end up with one link, the same on both
// sides. On an in-memory network in a synctest bubble: the second after
// the mesh forms is synthetic, and every goroutine has settled in it.
func TestMutualPeers(t *testing.T) {
	synctest.Test(t, testMutualPeers)
}

func testMutualPeers(t *testing.T) {
	g := memGrid(t)
	x := g.hub("x")
	y := g.hub("y", "x")
	z := g.hub("z", "x") // learns y from x; y learns z: both dial
	_ = y
	testwait.Until(t, "a full mesh", 10*time.Second, func() bool {
		return len(x.Links()) == 2 && len(y.Links()) == 2 && len(z.Links()) == 2
	})
	time.Sleep(time.Second) // learned-hub diallers race the configured ones
	synctest.Wait()
	for _, h := range []*testHub{x, y, z} {
		if n := len(h.Links()); n != 2 {
			t.Errorf("hub %s has %d links, want 2: %+v", h.name, n, h.Links())
		}
		for _, r := range h.Routes() {
			if !r.Reachable() || r.Hops != 1 {
				t.Errorf("hub %s: route %+v, want direct", h.name, r)
			}
		}
	}
	for _, pair := range [][2]*testHub{{x, y}, {x, z}, {y, z}} {
		a, b := pair[0], pair[1]
		var da, db bool
		for _, l := range a.Links() {
			if l.Peer == b.ID() {
				da = l.Dialed
			}
		}
		for _, l := range b.Links() {
			if l.Peer == a.ID() {
				db = l.Dialed
			}
		}
		if da == db {
			t.Errorf("link %s-%s: dialled=%v on both ends", a.name, b.name, da)
		}
	}
}

// Lookups find nodes on any hub, by name or ID, from any hub.
func TestLookupAcrossHubs(t *testing.T) {
	g, a, b, c := line(t)
	nodes := map[string]*hub.Session{"na": g.node("na", "a"), "nb": g.node("nb", "b"), "nc": g.node("nc", "c")}
	hubOf := map[string]*testHub{"na": a, "nb": b, "nc": c}
	for _, from := range nodes {
		for name, target := range nodes {
			for _, q := range []string{name, target.Machine().ID.String()} {
				ms, err := from.Lookup(context.Background(), q)
				if err != nil || len(ms) != 1 || ms[0].ID != target.Machine().ID || ms[0].Hub != hubOf[name].ID() || ms[0].Name != name {
					t.Errorf("%s looks up %s: %+v %v", from.Machine().Name, q, ms, err)
				}
			}
		}
	}
	start := time.Now()
	if _, err := nodes["na"].Lookup(context.Background(), "nobody"); !errors.Is(err, hub.ErrNotFound) {
		t.Errorf("lookup nobody: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a lookup every hub answered took %v: it should not wait for the timeout", d)
	}
}

// When two hubs dial each other at once, both keep the link dialled by
// the hub with the smaller ID.
func TestDuplicateLinkRule(t *testing.T) {
	h, err := New(Config{Name: "h", Creds: creds(t), Listen: "127.0.0.1:0", Logf: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer h.ln.Close()
	h.ctx = context.Background()
	other := creds(t).Key.ID()
	mk := func(dialed bool) *peer {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		return h.newPeer(a, nil, &wire.Hello{Role: "hub", Machine: identity.Machine{ID: other, Name: "o"}}, dialed, false)
	}
	ours, theirs := mk(true), mk(false)
	keep := theirs
	if minID(h.ID(), other) == h.ID() {
		keep = ours
	}
	for _, order := range [][2]*peer{{ours, theirs}, {theirs, ours}} {
		h.mu.Lock()
		delete(h.hubs, other)
		h.mu.Unlock()
		if err := h.register(order[0]); err != nil {
			t.Fatal(err)
		}
		err := h.register(order[1])
		h.mu.Lock()
		got := h.hubs[other]
		h.mu.Unlock()
		if got != keep {
			t.Errorf("registering dialled=%v then dialled=%v kept dialled=%v (%v)", order[0].dialed, order[1].dialed, got.dialed, err)
		}
	}
	// The same hub dialling twice: the first link stays.
	h.mu.Lock()
	delete(h.hubs, other)
	h.mu.Unlock()
	first, second := mk(true), mk(true)
	h.register(first)
	if err := h.register(second); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Errorf("second link from the same dialler: %v", err)
	}
}
