package hubserver

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/wire"
)

// partitioned builds the line A-B-C on g, attaches na at A and nc at C,
// and crashes B: A keeps B and C in its table, unreachable.
func partitioned(t *testing.T, g *grid) (a, b, c *testHub, na *hub.Session) {
	g.block("a", "c")
	c = g.hub("c")
	b = g.hub("b", "c")
	a = g.hub("a", "b")
	testwait.Until(t, "routes between A and C", 10*time.Second, func() bool {
		r1, ok1 := a.route(c)
		r2, ok2 := c.route(a)
		return ok1 && ok2 && r1.Reachable() && r2.Reachable()
	})
	na = g.node("na", "a")
	g.node("nc", "c")
	if _, err := na.Lookup(context.Background(), "nc"); err != nil {
		t.Fatalf("lookup before the partition: %v", err)
	}
	b.crash()
	testwait.Until(t, "A's routes to B and C to go unreachable", 10*time.Second, func() bool {
		rb, okb := a.route(b)
		rc, okc := a.route(c)
		return okb && okc && !rb.Reachable() && !rc.Reachable()
	})
	return a, b, c, na
}

// Issue 23's soak finding: during a partition a lookup of a node that is
// up behind it said only "node not found on any hub". Its error now names
// the hubs the node's hub could not ask, and why, as facts
// (*hub.NotFoundError), and still is ErrNotFound.
func TestLookupNamesUnreachedHubs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := memGrid(t)
		_, b, c, na := partitioned(t, g)
		_, err := na.Lookup(context.Background(), "nc")
		if !errors.Is(err, hub.ErrNotFound) {
			t.Fatalf("lookup across the partition: %v, want ErrNotFound", err)
		}
		var nf *hub.NotFoundError
		if !errors.As(err, &nf) {
			t.Fatalf("lookup across the partition: %T %v, want a *hub.NotFoundError", err, err)
		}
		if nf.Node != "nc" || nf.Hub != "a" || nf.Answered != 1 || len(nf.Unreached) != 2 {
			t.Fatalf("not-found facts %+v, want node nc, hub a, 1 answered, b and c unreached", nf)
		}
		for i, want := range []*testHub{b, c} {
			u := nf.Unreached[i]
			if u.Hub != want.ID() || u.Name != want.name || u.Cause != wire.UnreachedRoute || u.SinceMs == 0 {
				t.Errorf("unreached hub %d: %+v, want %s unreachable since a time", i, u, want.name)
			}
		}
		for _, w := range []string{"node not found on the 1 hub that answered", "2 hubs could not be asked", "b (unreachable since ", "c (unreachable since "} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not say %q", err, w)
			}
		}
	})
}

// A hub asked but silent within lookupWait is named too, with the wait.
func TestNotFoundNamesSilentHub(t *testing.T) {
	silent, lost := identity.ID{1}, identity.ID{2}
	q := &query{nodeQ: 7, waiting: map[identity.ID]bool{silent: true}, names: map[identity.ID]string{silent: "hiroshi", {3}: "answered"},
		noRoute: []wire.HubUnreached{{Hub: lost, Name: "das3v", Cause: wire.UnreachedRoute, SinceMs: 1}}}
	f := q.notFound()
	if f.Query != 7 || f.Answered != 2 || len(f.Unreached) != 2 || f.Unreached[0].Name != "das3v" ||
		f.Unreached[1] != (wire.HubUnreached{Hub: silent, Name: "hiroshi", Cause: wire.UnreachedNoAnswer, WaitMs: lookupWait.Milliseconds()}) {
		t.Fatalf("answer %+v", f)
	}
	err := &hub.NotFoundError{Node: "n", Hub: "h", Answered: f.Answered, Unreached: f.Unreached}
	want := "hub: lookup n: node not found on the 2 hubs that answered; 2 hubs could not be asked: das3v (unreachable since 00:00:00), hiroshi (no answer in 2s)"
	if err.Error() != want {
		t.Errorf("error %q\nwant  %q", err, want)
	}
	if _, err := wire.Decode(wire.Encode(&wire.Message{Kind: wire.KFound, Found: f})); err != nil {
		t.Errorf("the answer does not decode: %v", err)
	}
}

// A node of a version before wire.VersionUnreached decodes strictly: its
// lookup across the partition is answered without the new fields, and its
// link stays up; a node of the current version gets them.
func TestLookupUnreachedOlderNode(t *testing.T) {
	a, _, _, _ := partitioned(t, newGrid(t))
	old := dialVersion(t, a.Addr().String(), "old", wire.VersionUnreached-1)
	neu := dialVersion(t, a.Addr().String(), "neu", wire.Version)
	for _, n := range []*versionNode{old, neu} {
		b := n.lookup(t, "nc")
		m, err := wire.Decode(b)
		if err != nil || m.Kind != wire.KFound || len(m.Found.Matches) != 0 {
			t.Fatalf("version %d node: answer %s: %v", n.version, b, err)
		}
		has := bytes.Contains(b, []byte(`"unreached"`)) || bytes.Contains(b, []byte(`"answered"`))
		if n.version < wire.VersionUnreached && has {
			t.Errorf("a version %d node got %s", n.version, b)
		}
		if n.version >= wire.VersionUnreached && (m.Found.Answered != 1 || len(m.Found.Unreached) != 2) {
			t.Errorf("a version %d node got %s", n.version, b)
		}
	}
	old.lookup(t, "nc") // still linked
}
