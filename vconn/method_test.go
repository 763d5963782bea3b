package vconn

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/nat"
)

// Every method has its entry, and the table keeps the race's order and
// timing: direct, reverse, splice, routed by directness; direct and splice
// start at once, reverse one head start later, routed two; the grace a
// method gets follows the half round trips of its setup.
func TestMethodTable(t *testing.T) {
	if got, want := allMethods(), []Method{Direct, Reverse, Splice, Routed}; !slices.Equal(got, want) {
		t.Fatalf("methods by rank: %v, want %v", got, want)
	}
	n := &Node{cfg: Config{HeadStart: 25 * time.Millisecond}}
	for m, want := range map[Method]time.Duration{Direct: 0, Splice: 0, Reverse: 25 * time.Millisecond, Routed: 50 * time.Millisecond} {
		if got := n.startDelay(m); got != want {
			t.Errorf("%s starts after %v, want %v", m, got, want)
		}
	}
	for m, want := range map[Method]int{Direct: 5, Reverse: 6, Splice: 7, Routed: 2} {
		if got := methods[m].setupTrips(); got != want {
			t.Errorf("%s's setup takes %d half round trips, want %d", m, got, want)
		}
	}
	// a splice answered early takes three round trips
	if f, ok := methods[Splice].(interface{ fastestTrips() int }); !ok || f.fastestTrips() != 6 {
		t.Errorf("splice's fastest setup is not 6 half round trips")
	}
	if r := Method("carrier-pigeon").rank(); r <= Routed.rank() {
		t.Errorf("an unknown method ranks %d, before routed", r)
	}
	// An enabled method without an entry is not possible, and says so.
	n.cfg.Methods = []Method{"carrier-pigeon"}
	if err := n.possible("carrier-pigeon", identity.Machine{}); err == nil {
		t.Errorf("an unknown method is possible")
	}
}

// A splice to or from a host behind a sequential NAT observes that NAT's
// counter first, a round trip more per such end; the race waits for it
// (CI: nat-zoo's sequential host lost its splices to routed when the race
// gave it a plain splice's time), and a node tells its peers so.
func TestSequentialSpliceTrips(t *testing.T) {
	for _, tc := range []struct {
		self, target bool
		want         int
	}{{false, false, 7}, {true, false, 9}, {false, true, 9}, {true, true, 11}} {
		n := &Node{}
		if tc.self {
			n.self.nat.class = nat.Class{Allocation: nat.Sequential, Delta: 1}
		}
		if got := n.setupTrips(Splice, identity.Machine{NATSequential: tc.target}); got != tc.want {
			t.Errorf("splice, this end sequential %v, the target's %v: %d half round trips, want %d", tc.self, tc.target, got, tc.want)
		}
		if got := n.setupTrips(Direct, identity.Machine{NATSequential: tc.target}); got != 5 {
			t.Errorf("direct, this end sequential %v, the target's %v: %d half round trips, want 5", tc.self, tc.target, got)
		}
	}
	h := testHub(t, "site")
	a := testNode(t, "a", h, Splice)
	ext := netip.MustParseAddr("203.0.113.19")
	a.publishNAT(nat.Class{Allocation: nat.Sequential, Delta: 1, External: ext})
	if m := a.Machine(); !m.NATSequential || m.NAT != ext {
		t.Errorf("behind a sequential NAT, the node's identifier says NAT %v, sequential %v", m.NAT, m.NATSequential)
	}
	a.publishNAT(nat.Class{Allocation: nat.Preserving, External: ext})
	if m := a.Machine(); m.NATSequential {
		t.Errorf("behind a port-preserving NAT, the node's identifier still says sequential")
	}
}

// A race whose grace for a routed setup ran out waits on for a more
// direct method that reached its last step (a reverse setup's connection
// back in its handshake) a round trip of the routed path and twice the
// margin after it did, once; not for one that returned, nor for a less
// direct one.
func TestLastStepWait(t *testing.T) {
	n := &Node{}
	best := &result{method: Routed, elapsed: 20 * time.Millisecond} // one round trip: 20 ms
	reached := map[Method]time.Time{Reverse: time.Now().Add(-5 * time.Millisecond)}
	if w := n.lastStep(best, reached, map[Method]bool{}); w < 30*time.Millisecond || w > 35*time.Millisecond {
		t.Errorf("reverse at its last step 5 ms ago, routed's round trip 20 ms: waits %v, want about 35 ms", w)
	}
	if w := n.lastStep(best, reached, map[Method]bool{}); w > 0 {
		t.Errorf("a second wait for the same step: %v", w)
	}
	reached = map[Method]time.Time{Reverse: time.Now()}
	if w := n.lastStep(best, reached, map[Method]bool{Reverse: true}); w > 0 {
		t.Errorf("waits %v for a reverse setup that returned", w)
	}
	best = &result{method: Reverse, elapsed: 60 * time.Millisecond}
	reached = map[Method]time.Time{Routed: time.Now(), Splice: time.Now()}
	if w := n.lastStep(best, reached, map[Method]bool{}); w > 0 {
		t.Errorf("reverse won: waits %v for less direct methods", w)
	}
	reached = map[Method]time.Time{Direct: time.Now().Add(-time.Second)}
	if w := n.lastStep(best, reached, map[Method]bool{}); w > 0 {
		t.Errorf("waits %v for a method whose last step began a second ago", w)
	}
}
