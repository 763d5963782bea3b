package hubserver

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// tablePeer is a hub neighbour of protocol version v whose trunk's
// gossip arrives, decoded, on the returned channel.
func tablePeer(t *testing.T, h *Hub, v int) (*peer, <-chan *wire.Gossip) {
	return tablePeerID(t, h, v, creds(t).Key.ID())
}

// tablePeerID is tablePeer for the hub of ID id.
func tablePeerID(t *testing.T, h *Hub, v int, id identity.ID) (*peer, <-chan *wire.Gossip) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	got := make(chan *wire.Gossip, 100)
	go func() {
		r := wire.NewReader(b)
		for {
			f, err := r.Read()
			if err != nil {
				return
			}
			if f.Type != wire.TControl {
				continue
			}
			m, err := wire.Decode(f.Payload)
			if err == nil && m.Kind == wire.KGossip {
				got <- m.Gossip
			}
		}
	}()
	m := identity.Machine{ID: id, Name: "neighbour"}
	p := h.newPeer(a, nil, &wire.Hello{Role: "hub", Machine: m, Version: v}, true, false)
	if err := h.register(p); err != nil {
		t.Fatal(err)
	}
	return p, got
}

// sent is what h sends p when it sends its tables now: the entries, by
// hub, or nil if it sends no message.
func sent(t *testing.T, h *Hub, p *peer, got <-chan *wire.Gossip) map[identity.ID]wire.RouteAd {
	t.Helper()
	h.sendTable(p)
	var out map[identity.ID]wire.RouteAd
	for {
		select {
		case g := <-got:
			if out == nil {
				out = map[identity.ID]wire.RouteAd{}
			}
			for _, ad := range g.Routes {
				out[ad.Hub] = ad
			}
		case <-time.After(100 * time.Millisecond):
			return out
		}
	}
}

func newTestHub(t *testing.T) *Hub {
	h, err := New(Config{Name: "h", Creds: creds(t), Listen: "127.0.0.1:0", Logf: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.ln.Close() })
	h.ctx = context.Background()
	return h
}

// Between hubs of wire.VersionDelta, tables go by change: the whole table
// when the trunk comes up, then nothing while nothing changes, then only
// the entries that changed. A neighbour of an earlier version gets the
// whole table every time, without the field it does not know. (Before:
// the whole table every time, to every neighbour: 44 KB/s per hub idle
// on make scale's 100 hubs.)
func TestTablesByChange(t *testing.T) {
	h := newTestHub(t)
	a, fromA := tablePeer(t, h, wire.VersionDelta)
	old, fromOld := tablePeer(t, h, wire.VersionUnreached)
	x, y := creds(t).Key.ID(), creds(t).Key.ID()
	h.applyGossip(a, &wire.Gossip{Routes: []wire.RouteAd{
		{Hub: a.id, Name: "a", State: 100, Ver: wire.VersionDelta},
		{Hub: x, Name: "x", State: 200, Hops: 1, LatencyUs: 5000, Ver: wire.VersionDelta},
	}})
	// a's trunk comes up: the whole table (h itself, x poisoned: through
	// a; a's own entry is never sent to a)
	first := sent(t, h, a, fromA)
	if len(first) != 2 || first[h.id].Ver != wire.Version || first[x].Hops != wire.Unreachable || first[x].State != 200 {
		t.Fatalf("first table to a: %+v", first)
	}
	if again := sent(t, h, a, fromA); again != nil {
		t.Fatalf("nothing changed, yet sent: %+v", again)
	}
	// a tenth of latency more is no change worth a message
	h.applyGossip(a, &wire.Gossip{Routes: []wire.RouteAd{{Hub: x, Name: "x", State: 200, Hops: 1, LatencyUs: 5300, Ver: wire.VersionDelta}}})
	if again := sent(t, h, a, fromA); again != nil {
		t.Fatalf("after a small latency change, sent: %+v", again)
	}
	// y becomes known through a: only y's entry
	h.applyGossip(a, &wire.Gossip{Routes: []wire.RouteAd{{Hub: y, Name: "y", State: 300, Hops: 1, Ver: wire.VersionDelta}}})
	if d := sent(t, h, a, fromA); len(d) != 1 || d[y].State != 300 {
		t.Fatalf("after y was learned: %+v, want y's entry alone", d)
	}
	// the older neighbour: the whole table each time, no "ver"
	for range 2 {
		w := sent(t, h, old, fromOld)
		if len(w) != 4 {
			t.Fatalf("to a hub of version %d: %d entries, want the whole table (4)", wire.VersionUnreached, len(w))
		}
		for _, ad := range w {
			if ad.Ver != 0 {
				t.Fatalf("to a hub of version %d: an entry with ver %d", wire.VersionUnreached, ad.Ver)
			}
		}
	}
}

// A newer (odd) state number a neighbour lost hub x with, while this hub
// still reaches x through another neighbour, travels on to that next hop
// in the entry sent there; x's neighbour passes it to x itself, which
// takes the next even number above it, so that every hub takes its route
// anew (no state advances by the clock between hubs of
// wire.VersionDelta).
func TestLostStateTravelsToItsHub(t *testing.T) {
	h := newTestHub(t)
	a, fromA := tablePeer(t, h, wire.VersionDelta)
	b, fromB := tablePeer(t, h, wire.VersionDelta)
	x := creds(t).Key.ID()
	h.applyGossip(a, &wire.Gossip{Routes: []wire.RouteAd{{Hub: x, Name: "x", State: 200, Hops: 1, Ver: wire.VersionDelta}}})
	sent(t, h, a, fromA)
	sent(t, h, b, fromB)
	for len(h.trigger) > 0 {
		<-h.trigger
	}
	h.applyGossip(b, &wire.Gossip{Routes: []wire.RouteAd{{Hub: x, Name: "x", State: 201, Hops: wire.Unreachable, Ver: wire.VersionDelta}}})
	if h.nextHop(x) != a {
		t.Fatal("a working route through a was given up for b's unreachable entry")
	}
	if len(h.trigger) == 0 {
		t.Error("the lost state is not sent at once")
	}
	if d := sent(t, h, a, fromA); len(d) != 1 || d[x].State != 201 || d[x].Hops != wire.Unreachable {
		t.Fatalf("to the next hop a: %+v, want x unreachable at state 201", d)
	}
	if d := sent(t, h, b, fromB); d != nil {
		t.Fatalf("to b: %+v, want nothing (its entry for x is unchanged)", d)
	}

	// x's side: a neighbour passes it its own entry at its state or newer
	own := h.state
	h.applyGossip(a, &wire.Gossip{Routes: []wire.RouteAd{{Hub: h.id, State: own - 1, Hops: wire.Unreachable}}})
	if h.state != own {
		t.Fatalf("an older state moved ours: %d, was %d", h.state, own)
	}
	h.applyGossip(a, &wire.Gossip{Routes: []wire.RouteAd{{Hub: h.id, State: own + 1001, Hops: wire.Unreachable}}})
	if h.state != own {
		t.Fatalf("a state above any h made moved its own: %d, was %d", h.state, own)
	}
	h.applyGossip(a, &wire.Gossip{Routes: []wire.RouteAd{{Hub: h.id, State: own + 1, Hops: wire.Unreachable}}})
	if h.state != own+2 {
		t.Fatalf("after hearing itself lost at %d: state %d, want %d", own+1, h.state, own+2)
	}
	if d := sent(t, h, b, fromB); d[h.id].State != own+2 {
		t.Fatalf("to b after the jump: %+v", d)
	}
	// the newer even number reaches h for x: the wanted state is settled
	h.applyGossip(b, &wire.Gossip{Routes: []wire.RouteAd{{Hub: x, Name: "x", State: 202, Hops: 1, Ver: wire.VersionDelta}}})
	if d := sent(t, h, a, fromA); d[x].State != 202 || d[x].Hops != 2 {
		t.Fatalf("to a after x's new state through b: %+v", d)
	}
}

// A neighbour whose trunk was lost is told, when a new trunk to it comes
// up, the (odd) state this hub lost it at: its own state is older, so
// without that it would never be taken again (no state number advances
// by the clock between hubs of wire.VersionDelta). Before this rule, a
// trunk cut and restored between the only two hubs joining two sites
// left each site's hubs unreachable from the other (lab: TestHubPathsResume/Cut).
func TestLostNeighbourToldItsState(t *testing.T) {
	h := newTestHub(t)
	a, fromA := tablePeer(t, h, wire.VersionDelta)
	h.applyGossip(a, &wire.Gossip{Routes: []wire.RouteAd{{Hub: a.id, Name: "a", State: 100, Ver: wire.VersionDelta}}})
	if d := sent(t, h, a, fromA); d == nil || d[a.id].State != 0 {
		t.Fatalf("to a while its route works: %+v, want no entry for a itself", d)
	}
	h.unregister(a, errors.New("cut"))
	if h.nextHop(a.id) != nil {
		t.Fatal("route to a survived its trunk")
	}
	b, fromB := tablePeerID(t, h, wire.VersionDelta, a.id) // the trunk back
	h.applyGossip(b, &wire.Gossip{Routes: []wire.RouteAd{{Hub: a.id, Name: "a", State: 100, Ver: wire.VersionDelta}}})
	if h.nextHop(a.id) != nil {
		t.Fatal("a's older state brought its route back")
	}
	if d := sent(t, h, b, fromB); d[a.id].State != 101 || d[a.id].Hops != wire.Unreachable {
		t.Fatalf("to a over the new trunk: %+v, want a itself unreachable at 101", d)
	}
	h.applyGossip(b, &wire.Gossip{Routes: []wire.RouteAd{{Hub: a.id, Name: "a", State: 102, Ver: wire.VersionDelta}}})
	if h.nextHop(a.id) != b {
		t.Fatal("a's newer state did not bring its route back")
	}
}
