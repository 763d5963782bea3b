package vconn

import (
	"slices"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
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
