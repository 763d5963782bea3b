package hubserver

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
)

// A node claims both its virtual addresses while another hub its hub
// routes to never answers (its trunk has gone silent: it hears the claims
// and says nothing, until the hub notices and drops it): the hub gives
// its verdict once lookupWait is over, for the IPv6 address as for the
// IPv4 one, and a lookup of the node's name gives both. The hub waited
// for the second address's answers without end once the wait for the
// first had used up its one timer: the node's name had no address (its
// NAME.grid not found) for as long as that hub's answers did not come,
// under load in TestGrid6VIP. (On an in-memory network in a synctest
// bubble.)
func TestVirtualClaimSilentHub(t *testing.T) {
	synctest.Test(t, testVirtualClaimSilentHub)
}

func testVirtualClaimSilentHub(t *testing.T) {
	g := memGrid(t)
	a := g.hub("a")
	b := g.hub("b", "a")
	testwait.Until(t, "routes between a and b", 10*time.Second, func() bool {
		r, ok := a.route(b)
		return ok && r.Reachable()
	})
	n := g.node("n", "a")
	asker := g.node("asker", "a")
	b.mu.Lock()
	for p := range b.all {
		p.t.Mute() // b reads on, and sends nothing more
	}
	b.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.ClaimAddrs(ctx, v4a, v6a); err != nil {
		t.Fatalf("claim while hub b is silent: %v", err)
	}
	if v4, v6, err := n.VirtualAddrs(); v4 != v4a || v6 != v6a || err != nil {
		t.Errorf("n holds %v %v (%v), want %v %v", v4, v6, err, v4a, v6a)
	}
	ms, err := asker.Lookup(ctx, "n")
	if err != nil || len(ms) != 1 || !slices.Contains(ms[0].Virtual, v4a) || !slices.Contains(ms[0].Virtual, v6a) {
		t.Errorf("lookup of n at its hub: %+v %v, want its addresses %v and %v", ms, err, v4a, v6a)
	}
}
