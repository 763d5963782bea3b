package hubserver

import (
	"context"
	"testing"

	"github.com/gridlink/gridlink/wire"
)

// A next hop that changes between two working routes (a hub's newer
// state number arriving first through another neighbour, then the same
// state markedly cheaper through the first) waits for the next Interval's
// tables; a hub becoming reachable or unreachable is sent at once. With
// every next-hop change sent at once, make scale's 20 hubs at sites up to
// 20 ms apart sent their whole tables about 20 times a second each.
func TestNextHopChangeWaitsForTick(t *testing.T) {
	h, err := New(Config{Name: "h", Creds: creds(t), Listen: "127.0.0.1:0", Logf: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer h.ln.Close()
	h.ctx = context.Background()
	a, b := fuzzPeer(t, h, "hub"), fuzzPeer(t, h, "hub")
	x := creds(t).Key.ID()
	triggered := func() bool {
		select {
		case <-h.trigger:
			return true
		default:
			return false
		}
	}
	ad := func(state uint64, hops int, latUs int64) *wire.Gossip {
		return &wire.Gossip{Routes: []wire.RouteAd{{Hub: x, Name: "x", State: state, Hops: hops, LatencyUs: latUs}}}
	}
	step := func(what string, from *peer, g *wire.Gossip, next *peer, sent bool) {
		t.Helper()
		h.applyGossip(from, g)
		if got := h.nextHop(x); got != next {
			t.Fatalf("%s: next hop %v, want %v", what, got, next)
		}
		if got := triggered(); got != sent {
			t.Errorf("%s: tables sent at once: %v, want %v", what, got, sent)
		}
	}
	step("x learned, behind a", a, ad(100, 0, 0), a, true)
	step("x's newer state first through b", b, ad(102, 1, 5000), b, false)
	step("the same state, markedly cheaper through a", a, ad(102, 0, 0), a, false)
	step("x unreachable from its next hop a", a, ad(103, wire.Unreachable, 0), nil, true)
	step("x reachable again through b", b, ad(104, 1, 5000), b, true)
}
