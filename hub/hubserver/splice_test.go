package hubserver

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/nat"
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

// A hub logs a splice failure again only when its kind changes: failed
// punches name fresh ports at every try (a lab run on main logged each
// retry as news); the other hub's reasons to decline are kinds of their
// own; other failures are compared by type (direct.ErrorClass), never by
// words.
func TestSpliceFailureKey(t *testing.T) {
	punch := func(local, remote string, cause error) error {
		return fmt.Errorf("%w: %w", nat.ErrPunch, fmt.Errorf("splice %s -> %s: %w", local, remote, cause))
	}
	refused := func(remote string) error {
		return &nat.RefusedError{Remote: netip.MustParseAddrPort(remote), Tries: 3, Err: syscall.ECONNREFUSED}
	}
	same := [][2]error{
		{punch("[::]:34783", "[203.0.113.17:40821]", os.ErrDeadlineExceeded), punch("[::]:35001", "[203.0.113.17:40999]", os.ErrDeadlineExceeded)},
		{punch("[::]:1", "[203.0.113.17:2]", refused("203.0.113.17:2")), punch("[::]:3", "[203.0.113.17:4]", refused("203.0.113.17:4"))},
		{&spliceAnswered{&spliceDeclined{"east", "its NAT is random"}}, &spliceDeclined{"east", "its NAT is random"}},
		{fmt.Errorf("east %w within 5s", errNoSpliceAnswer), fmt.Errorf("west %w within 5s", errNoSpliceAnswer)},
		// not logged again for new words alone
		{fmt.Errorf("link to east: %w", errors.New("port 1234 gone")), fmt.Errorf("link to east: %w", errors.New("port 5678 gone"))},
	}
	for _, c := range same {
		if a, b := spliceFailureKey(c[0]), spliceFailureKey(c[1]); a != b {
			t.Errorf("%v and %v failed the same way, but their keys differ: %q, %q", c[0], c[1], a, b)
		}
	}
	differ := [][2]error{
		{punch("[::]:1", "[203.0.113.17:2]", os.ErrDeadlineExceeded), punch("[::]:1", "[203.0.113.17:2]", refused("203.0.113.17:2"))},
		{punch("[::]:1", "[203.0.113.17:2]", os.ErrDeadlineExceeded), fmt.Errorf("east %w within 5s", errNoSpliceAnswer)},
		{&spliceDeclined{"east", "its NAT is random"}, &spliceDeclined{"east", "splicing is off on hub east"}},
		{&spliceDeclined{"east", "its NAT is random"}, fmt.Errorf("east %w within 5s", errNoSpliceAnswer)},
	}
	for _, c := range differ {
		if a, b := spliceFailureKey(c[0]), spliceFailureKey(c[1]); a == b {
			t.Errorf("%v and %v failed differently, but share the key %q", c[0], c[1], a)
		}
	}
}
