package hubserver

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
)

// claimWaiting says whether hub h has a claim of name still waiting for
// another hub's answer.
func claimWaiting(h *testHub, name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cl := range h.claims {
		select {
		case <-cl.done:
			continue
		default:
		}
		if cl.name == name && cl.lost == nil && len(cl.waiting) > 0 {
			return true
		}
	}
	return false
}

// waitClaim waits until hub h's claim of name waits for an answer,
// looking every millisecond (so the claim has waited at most that long).
func waitClaim(t *testing.T, h *testHub, name string) {
	t.Helper()
	start := time.Now()
	for !claimWaiting(h, name) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("hub %s never claimed %s", h.name, name)
		}
		time.Sleep(time.Millisecond)
	}
}

// silenceTrunk makes hub h's trunk to hub to lose every byte it sends
// (h's answers and gossip vanish), its socket left open.
func silenceTrunk(h, to *testHub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for p := range h.all {
		if p.isHub && p.id == to.ID() {
			p.t.Mute()
			for _, l := range p.extraLanes() {
				l.t.Mute()
			}
		}
	}
}

// closeTrunk closes the sockets of hub h's trunk to hub to.
func closeTrunk(h, to *testHub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for p := range h.all {
		if p.isHub && p.id == to.ID() {
			p.t.Conn().Close()
			for _, l := range p.extraLanes() {
				l.t.Conn().Close()
			}
		}
	}
}

// A node whose hub dies re-attaches to another hub, whose route to the
// dead hub is still stale (through a third hub that has not noticed yet)
// when the node's name claim begins: once the route goes (the third hub
// notices), the claim stops waiting for the dead hub's answer, and the
// node is admitted at once, not after lookupWait (issue 20: the stall of
// a resumable stream whose far node's hub died). a-c-b; n on a, then b.
// (On an in-memory network in a synctest bubble.)
func TestReclaimAfterHubDeathNotWaited(t *testing.T) {
	synctest.Test(t, testReclaimAfterHubDeathNotWaited)
}

func testReclaimAfterHubDeathNotWaited(t *testing.T) {
	g := memGrid(t)
	g.block("a", "b")
	c := g.hub("c")
	a := g.hub("a", "c")
	b := g.hub("b", "c")
	testwait.Until(t, "routes between a and b", 10*time.Second, func() bool {
		r, ok := b.route(a)
		return ok && r.Reachable()
	})
	n := g.node("n", "a", "b")
	if n.Hub().ID != a.ID() {
		t.Fatalf("n attached to %s, want a", n.Hub().Name)
	}
	// a dies in two steps: first it falls silent to c (c's route to a,
	// and so b's, still stands) and n's link to it closes; n re-attaches
	// to b, whose claim of n asks a through c.
	silenceTrunk(a, c)
	a.mu.Lock()
	for p := range a.all {
		if !p.isHub {
			p.t.Mute()
			p.t.Conn().Close()
		}
	}
	a.mu.Unlock()
	waitClaim(t, b, "n")
	if r, ok := b.route(a); !ok || !r.Reachable() {
		t.Fatalf("b's route to a went before the claim began: %+v", r)
	}
	// then its trunk to c closes too: c notices, and so does b
	start := time.Now()
	a.crash()
	for n.Hub().ID != b.ID() {
		if time.Since(start) > 10*time.Second {
			t.Fatal("n did not re-attach to b")
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("n re-attached to b %v after a's route went", took)
	if took >= lookupWait/2 {
		t.Errorf("n re-attached %v after its hub's route went, want well under lookupWait (%v)", took, lookupWait)
	}
}

// A claim that stopped waiting for a hub whose route went keeps the
// uniqueness rule: another identity took the name at that hub first, and
// when the hubs meet again the later holder is refused, the earlier kept.
// a-c-b; first holds n1 at a; second claims n1 at b while a's trunk to c
// is silent, then gone.
func TestNameUnreachedHubSettledWhenMet(t *testing.T) {
	synctest.Test(t, testNameUnreachedHubSettledWhenMet)
}

func testNameUnreachedHubSettledWhenMet(t *testing.T) {
	g := memGrid(t)
	g.block("a", "b")
	c := g.hub("c")
	a := g.hub("a", "c")
	b := g.hub("b", "c")
	testwait.Until(t, "routes between a and b", 10*time.Second, func() bool {
		r, ok := b.route(a)
		return ok && r.Reachable()
	})
	first := g.node("n1", "a")
	time.Sleep(10 * time.Millisecond)
	silenceTrunk(a, c)
	done := make(chan *hub.Session, 1)
	go func() { done <- g.node("n1", "b") }()
	waitClaim(t, b, "n1")
	g.block("a", "c") // a and c stay apart a while
	start := time.Now()
	closeTrunk(a, c)
	second := <-done
	if took := time.Since(start); took >= lookupWait/2 {
		t.Errorf("the claim at b waited %v after a's route went, want well under lookupWait (%v)", took, lookupWait)
	}
	g.mu.Lock()
	delete(g.blocked, [2]string{"a", "c"})
	delete(g.blocked, [2]string{"c", "a"})
	g.mu.Unlock()
	testwait.Until(t, "the later holder to be told", 30*time.Second, func() bool { return second.Refused() != nil })
	expectErr(t, second.Refused(), hub.ErrNameTaken, first.Machine().ID.Short())
	if first.Refused() != nil {
		t.Errorf("the earlier holder was refused too: %v", first.Refused())
	}
}

// A node claims its virtual addresses while a hub its hub routes to has
// gone silent (a dying hub): once that hub's trunk closes, the claim
// stops waiting for its answers and the node holds its addresses at once,
// not after lookupWait. (On an in-memory network in a synctest bubble.)
func TestVirtualClaimUnreachedHubNotWaited(t *testing.T) {
	synctest.Test(t, testVirtualClaimUnreachedHubNotWaited)
}

func testVirtualClaimUnreachedHubNotWaited(t *testing.T) {
	g := memGrid(t)
	a := g.hub("a")
	b := g.hub("b", "a")
	testwait.Until(t, "routes between a and b", 10*time.Second, func() bool {
		r, ok := a.route(b)
		return ok && r.Reachable()
	})
	n := g.node("n", "a")
	silenceTrunk(b, a)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		done <- n.ClaimAddrs(ctx, v4a, v6a)
	}()
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("hub a never claimed n's addresses")
		}
		a.mu.Lock()
		waiting := false
		for _, cl := range a.vip.claims {
			waiting = waiting || len(cl.waiting) > 0
		}
		a.mu.Unlock()
		if waiting {
			break
		}
	}
	g.block("a", "b") // b stays away
	start := time.Now()
	closeTrunk(b, a)
	if err := <-done; err != nil {
		t.Fatalf("claim: %v", err)
	}
	if took := time.Since(start); took >= lookupWait/2 {
		t.Errorf("the claim waited %v after b's trunk closed, want well under lookupWait (%v)", took, lookupWait)
	}
	if v4, v6, err := n.VirtualAddrs(); v4 != v4a || v6 != v6a || err != nil {
		t.Errorf("n holds %v %v (%v), want %v %v", v4, v6, err, v4a, v6a)
	}
}

// A hub that joins (or returns) holding no nodes is not told every name
// of the overlay: it has no holder to judge them against (before, a
// restarted hub of make scale's overlay received all 10,000). A hub that
// joins with nodes is told, and a name its node took while the hubs were
// apart is settled (TestNameSettledWhenHubsMeet).
func TestNoReclaimAtEmptyHub(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := memGrid(t)
		a := g.hub("a")
		for i := range 20 {
			g.node(fmt.Sprintf("n%02d", i), "a")
		}
		b := g.hub("b", "a")
		testwait.Until(t, "a route from a to b", 10*time.Second, func() bool {
			r, ok := a.route(b)
			return ok && r.Reachable()
		})
		time.Sleep(5 * testInterval)
		if n := a.reclaimed.Load(); n != 0 {
			t.Errorf("a told b, which holds no nodes, %d names", n)
		}
		// c joins with a node of its own: a tells it its 20 names
		g.block("c", "a")
		g.block("c", "b")
		c := g.hub("c")
		g.node("m00", "c")
		time.Sleep(3 * testInterval) // c's entry says it holds a node
		g.hub("d", "c", "a")         // d holds none; c becomes reachable through it
		testwait.Until(t, "a route from a to c", 10*time.Second, func() bool {
			r, ok := a.route(c)
			return ok && r.Reachable()
		})
		time.Sleep(5 * testInterval)
		if n := a.reclaimed.Load(); n != 20 {
			t.Errorf("a told the hubs it met %d names; want its 20 told c (which holds a node), none told d", n)
		}
	})
}

// A claim still waiting when another hub becomes reachable waits for that
// hub's answer too: with no reclaim at a hub that holds no nodes, this is
// what settles a name taken there before the node is admitted. b claims
// n1 while its trunk to c is silent (the claim waits); meanwhile d links
// b to a, where another identity holds n1: the node at b is refused, with
// the holder named, and a's node keeps the name. (When a's answer is
// lost because a has no route back to b yet, the node is admitted when
// the claim's wait runs out and refused right after: claimFollowUp.)
//
// On loopback in real time: in a synctest bubble the clock jumps ahead
// while d's trunks form, and c's silent trunk is closed (the claim then
// stops waiting for it) before a's route reaches b.
func TestClaimInFlightAsksHubMet(t *testing.T) {
	{
		g := newGrid(t)
		g.block("a", "b")
		g.block("a", "c")
		g.hub("a")
		c := g.hub("c")
		b := g.hub("b", "c")
		first := g.node("n1", "a")
		testwait.Until(t, "a route from b to c", 10*time.Second, func() bool {
			r, ok := b.route(c)
			return ok && r.Reachable()
		})
		silenceTrunk(c, b) // c's answers to b's claims vanish: they wait
		type result struct {
			s   *hub.Session
			err error
		}
		done := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err := hub.Attach(ctx, hub.SessionConfig{Creds: creds(t), Machine: identity.Machine{Name: "n1"}, Hubs: []string{b.Addr().String()}, Logf: testLogf(t, "second: "), Dial: g.dial})
			done <- result{s, err}
		}()
		waitClaim(t, b, "n1")
		g.hub("d", "a", "b") // a becomes reachable from b while the claim waits
		r := <-done
		if r.err == nil {
			// a's answer to the widened claim was lost (a had no route
			// back to b yet) and the claim's wait ran out: b then tells a
			// the name once its node is in (claimFollowUp), and a's
			// holder has it refused
			defer r.s.Close()
			testwait.Until(t, "the second n1 to be refused after its admission", 10*time.Second, func() bool { return r.s.Refused() != nil })
			r.err = r.s.Refused()
		}
		expectErr(t, r.err, hub.ErrNameTaken, first.Machine().ID.Short())
		if first.Refused() != nil {
			t.Errorf("the holder was refused: %v", first.Refused())
		}
	}
}
