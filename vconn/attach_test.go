package vconn

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
)

// A node restarted with a fresh key under the same name is reached on
// the first dial by a node that had its old identity cached: the failed
// dial looks the name up again and tries once more.
func TestStaleNameRetried(t *testing.T) {
	for _, noCache := range []bool{false, true} {
		t.Run(map[bool]string{false: "CachedMethod", true: "NoMethodCache"}[noCache], func(t *testing.T) {
			staleName(t, noCache)
		})
	}
}

// staleName: with the method cache, the cached method fails and the name
// is looked up again before the race; without, the race fails first.
func staleName(t *testing.T, noCache bool) {
	h := testHub(t, "h")
	a, err := Start(context.Background(), Config{Name: "a", ListenAddr: "127.0.0.1", Hubs: []string{h.Addr().String()},
		Methods: []Method{Direct, Reverse, Routed}, NoCache: noCache, HeadStart: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b1 := testNode(t, "b", h)
	serveEcho(t, b1, 7)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := a.Dial(ctx, "b:7")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	old := b1.ID()
	b1.Close()
	b2 := testNode(t, "b", h)
	serveEcho(t, b2, 7)
	testwait.Until(t, "the hub to list the new b", 20*time.Second, func() bool {
		ms, err := a.session.Lookup(ctx, "b")
		if err == nil && len(ms) == 1 && ms[0].ID == b2.ID() {
			return true
		}
		t.Logf("the hub lists b as %v (%v)", ms, err)
		return false
	})
	c, err = a.Dial(ctx, "b:7")
	if err != nil {
		t.Fatalf("first dial to b after its restart with a fresh key (was %s): %v", old.Short(), err)
	}
	defer c.Close()
	if got := c.RemoteAddr().(Addr).Node.ID; got != b2.ID() {
		t.Errorf("reached %s, want the new b %s", got.Short(), b2.ID().Short())
	}
	echoCheck(t, c, 1000)
}

// A node whose hub is gone fails a dial that needs a hub at once with a
// *NotAttachedError; it started before its hub without failing.
func TestDialNotAttached(t *testing.T) {
	cfg := Config{Name: "lonely", ListenAddr: "127.0.0.1", Hubs: []string{"127.0.0.1:1"}} // nothing listens there
	n, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("a node whose hub is down does not start: %v", err)
	}
	defer n.Close()
	var na *NotAttachedError
	if err := n.Attached(); !errors.As(err, &na) {
		t.Fatalf("Attached: %v; want a *NotAttachedError", err)
	}
	if st := n.AttachState(); !strings.HasPrefix(st, "attaching to 127.0.0.1:1: ") || !strings.Contains(st, ", retrying") {
		t.Errorf("attach state %q", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err = n.Dial(ctx, "anyone:7")
	if !errors.As(err, &na) || !strings.Contains(err.Error(), "not attached to any hub since ") {
		t.Errorf("dial without a hub: %v; want a *NotAttachedError", err)
	}
	t.Logf("dial without a hub failed in %v: %v", time.Since(start).Round(time.Millisecond), err)
}

// A name that is not one (identity.CheckName; issue 32) fails Start up
// front, before a listener or a hub: every hub would refuse it. (The
// listen address is not this host's: a Start that got as far as
// listening would fail there instead.)
func TestBadNameRefusedAtStart(t *testing.T) {
	for _, name := range []string{"c.grid", "a b", "x\x1b[2J"} {
		n, err := Start(context.Background(), Config{Name: name, ListenAddr: "192.0.2.1", Hubs: []string{"127.0.0.1:1"}})
		if !errors.Is(err, identity.ErrBadName) {
			if n != nil {
				n.Close()
			}
			t.Errorf("Start as %q: %v, want the name refused", name, err)
		}
	}
}
