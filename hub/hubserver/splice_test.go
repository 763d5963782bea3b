package hubserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
)

// Two hubs that cannot dial each other but hear of each other through a
// third splice a direct link; their routes then take it, and circuits
// across work.
func TestSplicedHubLink(t *testing.T) {
	g := newGrid(t)
	g.splice = true
	g.block("a", "c")
	c := g.hub("c")
	b := g.hub("b", "c")
	a := g.hub("a", "b")
	testwait.Until(t, "a spliced link between a and c", 20*time.Second, func() bool {
		return a.linkedTo(c.ID()) && c.linkedTo(a.ID())
	})
	testwait.Until(t, "one-hop routes between a and c", 10*time.Second, func() bool {
		r1, ok1 := a.route(c)
		r2, ok2 := c.route(a)
		return ok1 && ok2 && r1.Hops == 1 && r2.Hops == 1
	})
	_ = b
	na, nc := g.node("na", "a"), g.node("nc", "c")
	serve(nc, 7, echo)
	roundTrip(t, openTo(t, na, nc, 7), "across the spliced link")
}

// A hub with splicing off answers an offer with a refusal, and the
// offering hub remembers it instead of offering again at once.
func TestSpliceRefused(t *testing.T) {
	g := newGrid(t)
	g.block("a", "c")
	g.splice = true
	c := g.hub("c")
	g.hub("b", "c")
	g.splice = false
	a := g.hub("a", "b") // splicing off
	testwait.Until(t, "routes between a and c", 10*time.Second, func() bool {
		r1, ok1 := a.route(c)
		r2, ok2 := c.route(a)
		return ok1 && ok2 && r1.Reachable() && r2.Reachable()
	})
	_, _, err := c.spliceHub(context.Background(), a.ID())
	if err == nil || !strings.Contains(err.Error(), "splicing is off on hub a") {
		t.Fatalf("offer to a hub with splicing off: %v", err)
	}
	if c.shouldSplice(a.ID()) {
		t.Error("after the refusal c would offer again at once")
	}
	if a.linkedTo(c.ID()) {
		t.Fatal("a hub with splicing off got a spliced link")
	}
}
