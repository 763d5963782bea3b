package hubserver

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/wire"
)

// Issue 23: a node whose hub dies re-attaches to another and returns to
// its own (the first of its hubs) once that hub is back (hub/home.go).
// These run on an in-memory network in a synctest bubble: the probes'
// backoff is real code on synthetic time, so minutes pass at once and
// the times measured are exact.

// The bounds of hub/home.go, as the tests hold the session to them.
const (
	probeMin    = 2 * time.Second  // hub.homeProbeMin
	probeMax    = 30 * time.Second // hub.homeProbeMax
	probeJitter = 0.1              // ±10%
	reachMax    = 10 * time.Second // hub.homeReach
)

// restart starts hub th again after a crash or stop, as its process
// restarted: the same key, address and peers.
func (g *grid) restart(th *testHub) *testHub {
	g.t.Helper()
	cfg := th.cfg
	cfg.Listener = nil
	if g.mem != nil {
		ln, err := g.mem.Listen(th.Addr().String())
		if err != nil {
			g.t.Fatal(err)
		}
		cfg.Listener = ln
	} else {
		cfg.Listen = th.Addr().String()
	}
	h, err := New(cfg)
	if err != nil {
		g.t.Fatal(err)
	}
	return g.serve(th.name, h)
}

// timedLog keeps a session's log lines with the time of each.
type timedLog struct {
	t     testing.TB
	mu    sync.Mutex
	lines []string
	at    []time.Time
}

func (l *timedLog) logf(f string, a ...any) {
	line := fmt.Sprintf(f, a...)
	l.mu.Lock()
	l.lines, l.at = append(l.lines, line), append(l.at, time.Now())
	l.mu.Unlock()
}

// find lists the lines containing sub, and when each was logged.
func (l *timedLog) find(sub string) (lines []string, at []time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, s := range l.lines {
		if strings.Contains(s, sub) {
			lines, at = append(lines, s), append(at, l.at[i])
		}
	}
	return lines, at
}

// dialLog records when a node dialled each address.
type dialLog struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (d *dialLog) wrap(dial func(context.Context, string) (net.Conn, error)) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, spec string) (net.Conn, error) {
		d.mu.Lock()
		if d.at == nil {
			d.at = map[string][]time.Time{}
		}
		d.at[spec] = append(d.at[spec], time.Now())
		d.mu.Unlock()
		return dial(ctx, spec)
	}
}

// since lists the dials of addr at or after t.
func (d *dialLog) since(addr string, t time.Time) []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []time.Time
	for _, at := range d.at[addr] {
		if !at.Before(t) {
			out = append(out, at)
		}
	}
	return out
}

// after lists the dials of addr after the first skip ones (fake time may
// not have moved between a dial and the instant a test starts counting).
func (d *dialLog) after(addr string, skip int) []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.at[addr][min(skip, len(d.at[addr])):])
}

// fallen is a node n whose home hub a crashed: n fell over to b, its
// second hub, which a was linked to.
type fallen struct {
	g     *grid
	a, b  *testHub
	n     *hub.Session
	nlog  *timedLog
	dials *dialLog // n's dials, from its first attach on
	addrA string   // a's address (a restarted keeps it)
	// atFall is how many times n had dialled a when it was found on b:
	// its later dials of a are dials.after(addrA, atFall) (in fake time
	// the first ones can share the instant a test starts counting).
	atFall int
}

// fallenOver sets up a fallen node with cfg (its Dial logged).
func fallenOver(t *testing.T, cfg hub.SessionConfig) fallen {
	t.Helper()
	f := fallen{g: memGrid(t), nlog: &timedLog{t: t}, dials: &dialLog{}}
	f.b = f.g.hub("b")
	f.a = f.g.hub("a", "b")
	linked(t, f.a.Hub, f.b.Hub)
	cfg.Dial = f.dials.wrap(f.g.dial)
	f.n = f.g.homeNode("n", cfg, f.nlog, "a", "b")
	f.addrA = f.a.Addr().String()
	f.a.crash()
	testwait.Until(t, "n to fall over to b", 10*time.Second, func() bool { return f.n.Hub().ID == f.b.ID() })
	f.atFall = len(f.dials.since(f.addrA, time.Time{}))
	return f
}

// homeNode attaches a node to the named hubs in order, with cfg's
// credentials (default fresh), NoReturn and Dial (default the grid's),
// its log in log.
func (g *grid) homeNode(name string, cfg hub.SessionConfig, log *timedLog, hubs ...string) *hub.Session {
	g.t.Helper()
	for _, h := range hubs {
		cfg.Hubs = append(cfg.Hubs, g.get(h).Addr().String())
	}
	if cfg.Creds == nil {
		cfg.Creds = creds(g.t)
	}
	if cfg.Dial == nil {
		cfg.Dial = g.dial
	}
	cfg.Machine = identity.Machine{Name: name}
	tl := testLogf(g.t, name+": ")
	cfg.Logf = func(f string, a ...any) { log.logf(f, a...); tl(f, a...) }
	s, err := hub.Connect(cfg)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitAttached(ctx); err != nil {
		g.t.Fatalf("attach %s: %v", name, err)
	}
	return s
}

func holds(th *testHub, name string) bool {
	for _, m := range th.Nodes() {
		if m.Name == name {
			return true
		}
	}
	return false
}

// gapsFollowBackoff fails unless the k-th pause between probes (dials of
// the preferred hub) is at least the backoff's k-th step (2 s doubling
// to 30 s, less its jitter): the next probe after a failed one, or after
// a move home and the loss of home again, waits twice as long.
func gapsFollowBackoff(t *testing.T, probes []time.Time) {
	t.Helper()
	step := probeMin
	for k := 1; k < len(probes); k++ {
		step = min(2*step, probeMax)
		least := time.Duration(float64(step) * (1 - probeJitter))
		if gap := probes[k].Sub(probes[k-1]); gap < least {
			t.Errorf("probe %d came %v after the one before; the backoff allows no less than %v", k, gap, least)
		}
	}
}

// A node attached to hub a, the first of its hubs, falls over to b when
// a dies and returns to a once a restarts (the same key and address),
// within the backoff's bound: attached to a before it leaves b, its name
// claim moved without conflict, lookups of it from a node of b answered
// all along (through b, then a: b answers no more once the node told it
// that it moved, though its link to b stays), and a circuit through b
// that was open across the move carrying on until it ends; then b lets
// the node go and its name resolves through a.
func TestNodeReturnsHome(t *testing.T) {
	synctest.Test(t, testNodeReturnsHome)
}

func testNodeReturnsHome(t *testing.T) {
	g := memGrid(t)
	b := g.hub("b")
	a := g.hub("a", "b")
	linked(t, a.Hub, b.Hub)
	nlog := &timedLog{t: t}
	n := g.homeNode("n", hub.SessionConfig{}, nlog, "a", "b")
	serve(n, 7, echo)
	m := g.node("m", "b")
	if n.Hub().ID != a.ID() {
		t.Fatalf("n attached to %s, want a", n.Hub().Name)
	}
	checkChoice(t, n, "at home", 0, 2, true)

	a.crash()
	testwait.Until(t, "n to fall over to b", 10*time.Second, func() bool { return n.Hub().ID == b.ID() })
	fell := time.Now()
	checkChoice(t, n, "fallen over to b", 1, 2, true)
	cir := openTo(t, m, n, 7)
	roundTrip(t, cir, "through b before the move")

	// m looks n up every 100 ms from now on: every lookup is answered.
	stop := make(chan struct{})
	var lookups sync.WaitGroup
	var lmu sync.Mutex
	var fails []string
	okAt := map[string]int{}
	var foundAt []struct {
		asked time.Time
		hub   string
	}
	lookups.Add(1)
	go func() {
		defer lookups.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			asked := time.Now()
			ms, err := m.Lookup(ctx, "n")
			cancel()
			lmu.Lock()
			if err != nil || len(ms) != 1 || ms[0].ID != n.Machine().ID {
				fails = append(fails, fmt.Sprintf("%v %v", ms, err))
			} else {
				okAt[ms[0].HubName]++
				foundAt = append(foundAt, struct {
					asked time.Time
					hub   string
				}{asked, ms[0].HubName})
			}
			lmu.Unlock()
		}
	}()

	// a stays down past n's first probe (about 2 s after the fall), so
	// the next comes about 4 s after that one.
	time.Sleep(5*time.Second - time.Since(fell))
	restarted := time.Now()
	a = g.restart(a)
	bound := time.Duration(float64(2*probeMin)*(1+probeJitter)) + reachMax
	testwait.Until(t, "n to return to a", bound+time.Second, func() bool { return n.Hub().ID == a.ID() })
	checkChoice(t, n, "back home", 0, 2, true)
	lines, at := nlog.find("moved from hub b to hub a")
	if len(lines) != 1 {
		t.Fatalf("log lines of the move: %q; want one", lines)
	}
	took := at[0].Sub(restarted)
	t.Logf("n returned to a %v after a restarted (%v after it fell over to b): %s", took, at[0].Sub(fell), lines[0])
	if took > bound {
		t.Errorf("n returned %v after a restarted; the probe's bound is %v", took, bound)
	}
	if !holds(b, "n") {
		t.Errorf("b let n go with a circuit of it still open")
	}
	roundTrip(t, cir, "through b after the move")
	cir.Close()
	testwait.Until(t, "b to let n go once its circuit ended", 5*time.Second, func() bool { return !holds(b, "n") })
	if !holds(a, "n") {
		t.Errorf("a does not hold n")
	}
	ms, err := m.Lookup(context.Background(), "n")
	if err != nil || len(ms) != 1 || ms[0].Hub != a.ID() {
		t.Errorf("m's lookup of n after the move: %v %v; want n at a", ms, err)
	}
	cir2 := openTo(t, m, n, 7)
	roundTrip(t, cir2, "through a")
	time.Sleep(time.Second)
	close(stop)
	lookups.Wait()
	lmu.Lock()
	t.Logf("m's lookups of n answered: %v", okAt)
	if len(fails) > 0 {
		t.Errorf("%d of m's lookups of n failed: %q", len(fails), fails)
	}
	if okAt["b"] == 0 || okAt["a"] == 0 {
		t.Errorf("m's lookups found n at %v; want both b (before the move) and a (after)", okAt)
	}
	// n told b it moved (wire.KMoved): from then on b no longer answers
	// for n, though n's link to b stays while the circuit through b is
	// open, and the lookups find n at a
	for _, f := range foundAt {
		if f.asked.After(at[0].Add(50*time.Millisecond)) && f.hub != "a" {
			t.Errorf("a lookup asked %v after n moved to a found it at %s", f.asked.Sub(at[0]), f.hub)
		}
	}
	lmu.Unlock()
	if err := n.Refused(); err != nil {
		t.Errorf("n refused: %v", err)
	}
	if k := g.logged.count("loses its name") + g.logged.count("held by another"); k > 0 {
		t.Errorf("%d lines of a name or address conflict over n's own move", k)
	}
}

// A preferred hub that goes up for 1 s and down for 1 s does not make the
// node move faster than its backoff: every probe of it waits at least
// twice as long as the one before (to 30 s), whether the one before
// failed or moved the node home just before home went again.
func TestNodeHomeFlapping(t *testing.T) {
	synctest.Test(t, testNodeHomeFlapping)
}

func testNodeHomeFlapping(t *testing.T) {
	f := fallenOver(t, hub.SessionConfig{})
	g, a, nlog, dials, addrA := f.g, f.a, f.nlog, f.dials, f.addrA
	start := time.Now()
	for time.Since(start) < 3*time.Minute {
		time.Sleep(time.Second)
		a = g.restart(a)
		time.Sleep(time.Second)
		a.crash()
	}
	probes := dials.after(addrA, f.atFall)
	moves, _ := nlog.find("moved from hub b to hub a")
	t.Logf("in %v of a flapping: %d probes of a, %d moves to a", time.Since(start).Round(time.Second), len(probes), len(moves))
	if len(probes) < 5 || len(probes) > 12 {
		t.Errorf("%d probes of a in 3 minutes; the backoff makes 7 to 9", len(probes))
	}
	gapsFollowBackoff(t, probes)
	if len(moves) > len(probes) {
		t.Errorf("%d moves to a, more than its %d probes", len(moves), len(probes))
	}
}

// A preferred hub that answers but refuses the node (a hub of another
// grid: another CA) is not moved to: the node stays on b, probes it at
// the backoff's pace, and logs the refusal once, naming it, not at every
// probe.
func TestNodeHomeRefuses(t *testing.T) {
	synctest.Test(t, testNodeHomeRefuses)
}

func testNodeHomeRefuses(t *testing.T) {
	g := memGrid(t)
	ours, theirs := pkitest.New(t, "ours"), pkitest.New(t, "theirs")
	b := g.hubWith("b", ours.Member(t, ca.Hub, "b"))
	a := g.hubWith("a", theirs.Member(t, ca.Hub, "a"))
	nlog := &timedLog{t: t}
	var dials dialLog
	start := time.Now()
	n := g.homeNode("n", hub.SessionConfig{Creds: ours.Member(t, ca.Node, "n"), Dial: dials.wrap(g.dial)}, nlog, "a", "b")
	if n.Hub().ID != b.ID() {
		t.Fatalf("n attached to %s, want b", n.Hub().Name)
	}
	time.Sleep(4 * time.Minute)
	if n.Hub().ID != b.ID() {
		t.Errorf("n moved to %s, a hub that refuses it", n.Hub().Name)
	}
	if moves, _ := nlog.find("moved from"); len(moves) > 0 {
		t.Errorf("n moved: %q", moves)
	}
	probes := dials.since(a.Addr().String(), start)[1:] // the first is the first round's
	lines, _ := nlog.find("staying on hub b")
	t.Logf("in 4 minutes: %d probes of a, %d lines logged: %q", len(probes), len(lines), lines)
	if len(probes) < 6 || len(probes) > 14 {
		t.Errorf("%d probes of a in 4 minutes; the backoff makes 9 to 11", len(probes))
	}
	gapsFollowBackoff(t, probes)
	if len(lines) != 1 {
		t.Fatalf("the refusal logged %d times; want once", len(lines))
	}
	if !strings.Contains(lines[0], a.Addr().String()) || !strings.Contains(lines[0], "not signed by a configured CA") {
		t.Errorf("the refusal logged does not name hub a's address and why: %q", lines[0])
	}
}

// With NoReturn the node stays on the hub it fell over to: it does not
// even probe its first hub once that is back.
func TestNodeNoReturn(t *testing.T) {
	synctest.Test(t, testNodeNoReturn)
}

func testNodeNoReturn(t *testing.T) {
	f := fallenOver(t, hub.SessionConfig{NoReturn: true})
	b, n, dials := f.b, f.n, f.dials
	f.g.restart(f.a)
	time.Sleep(2 * time.Minute)
	if n.Hub().ID != b.ID() {
		t.Errorf("n moved to %s with NoReturn", n.Hub().Name)
	}
	if p := dials.after(f.addrA, f.atFall); len(p) > 0 {
		t.Errorf("n probed a %d times with NoReturn", len(p))
	}
	checkChoice(t, n, "staying on b", 1, 2, false)
}

// checkChoice checks what a session says of its hub's place among its
// hubs (what `gridlink status` shows).
func checkChoice(t *testing.T, n *hub.Session, when string, wantIdx, wantOf int, wantReturns bool) {
	t.Helper()
	if idx, of, returns := n.HubChoice(); idx != wantIdx || of != wantOf || returns != wantReturns {
		t.Errorf("%s: HubChoice says hub %d of %d, returns %v; want %d of %d, %v", when, idx, of, returns, wantIdx, wantOf, wantReturns)
	}
}

// A preferred hub that admits the node but reaches no other hub (its
// links to them cut) while the node's current hub reaches others is not
// moved to: the move would cut the node off the overlay. The node stays,
// says why once, and moves once the hub links again.
func TestNodeHomeIsolated(t *testing.T) {
	synctest.Test(t, testNodeHomeIsolated)
}

func testNodeHomeIsolated(t *testing.T) {
	g := memGrid(t)
	c := g.hub("c")
	b := g.hub("b", "c")
	a := g.hub("a", "b")
	linked(t, a.Hub, b.Hub, c.Hub)
	nlog := &timedLog{t: t}
	n := g.homeNode("n", hub.SessionConfig{}, nlog, "a", "b")
	a.crash()
	testwait.Until(t, "n to fall over to b", 10*time.Second, func() bool { return n.Hub().ID == b.ID() })
	g.block("a", "b")
	g.block("a", "c")
	a = g.restart(a)
	time.Sleep(90 * time.Second)
	if n.Hub().ID != b.ID() {
		t.Fatalf("n moved to %s, which reaches no other hub", n.Hub().Name)
	}
	lines, _ := nlog.find("reaches no other hub")
	t.Logf("%q", lines)
	if len(lines) != 1 {
		t.Errorf("logged %d times why n stays on b; want once", len(lines))
	}
	g.mu.Lock()
	clear(g.blocked)
	g.mu.Unlock()
	unblocked := time.Now()
	testwait.Until(t, "n to return to a once it links again", 2*probeMax, func() bool { return n.Hub().ID == a.ID() })
	t.Logf("n returned to a %v after its links were let through", time.Since(unblocked))
}

// A node that moves home from a hub older than wire.VersionMoved does
// not tell it (that hub would take the unknown message for a broken link
// and reset the circuits still on it): the circuit through the old hub
// carries on across the move, as before.
func TestNodeMovesFromOlderHub(t *testing.T) {
	synctest.Test(t, testNodeMovesFromOlderHub)
}

func testNodeMovesFromOlderHub(t *testing.T) {
	g := memGrid(t)
	b := g.hub("b")
	b.Hub.version = wire.VersionDelta
	a := g.hub("a", "b")
	linked(t, a.Hub, b.Hub)
	n := g.homeNode("n", hub.SessionConfig{}, &timedLog{t: t}, "a", "b")
	serve(n, 7, echo)
	m := g.node("m", "b")
	a.crash()
	testwait.Until(t, "n to fall over to b", 10*time.Second, func() bool { return n.Hub().ID == b.ID() })
	cir := openTo(t, m, n, 7)
	a = g.restart(a)
	testwait.Until(t, "n to return to a", 30*time.Second, func() bool { return n.Hub().ID == a.ID() })
	time.Sleep(time.Second)
	roundTrip(t, cir, "through the older hub b after the move")
	if !holds(b, "n") {
		t.Errorf("b let n go with a circuit of it still open")
	}
	cir.Close()
	if k := g.logged.count("moved to hub"); k > 0 {
		t.Errorf("the older hub b was told of the move (%d lines)", k)
	}
}

// A node speaks only for itself with wire.KMoved: one that says it moved
// hides itself from lookups at the hub, never another node, and keeps
// its link.
func TestMovedOnlyOneself(t *testing.T) {
	g := newGrid(t)
	h := g.hub("h")
	n := g.node("n", "h")
	liar := dialVersion(t, h.Addr().String(), "liar", wire.Version)
	liar.send(t, &wire.Message{Kind: wire.KMoved, Moved: &wire.Moved{To: n.Machine().ID}})
	for _, c := range []struct {
		name string
		want int
	}{{"n", 1}, {"liar", 0}} {
		b := liar.lookup(t, c.name)
		m, err := wire.Decode(b)
		if err != nil || m.Found == nil || len(m.Found.Matches) != c.want {
			t.Errorf("lookup of %s after liar said it moved: %s %v; want %d matches", c.name, b, err, c.want)
		}
	}
	if !holds(h, "liar") || !holds(h, "n") {
		t.Errorf("h let a node go: holds liar %v, n %v", holds(h, "liar"), holds(h, "n"))
	}
}
