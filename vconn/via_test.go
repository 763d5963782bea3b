package vconn

import (
	"context"
	"errors"
	"testing"
	"time"
)

// DialMachineVia races only the methods asked for: a shortcut (direct,
// reverse, splice) between nodes that can connect directly is direct,
// routed alone is routed, and neither touches the other's cache entry
// beyond what won.
func TestDialMachineVia(t *testing.T) {
	h := testHub(t, "site")
	a := testNode(t, "a", h)
	b := testNode(t, "b", h)
	serveEcho(t, b, 7000)
	waitResolvable(t, a, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		via  []Method
		want Method
	}{{[]Method{Routed}, Routed}, {[]Method{Direct, Reverse, Splice}, Direct}, {[]Method{Reverse}, Reverse}, {[]Method{Routed}, Routed}} {
		c, err := a.DialMachineVia(ctx, b.Machine(), 7000, tc.via...)
		if err != nil {
			t.Fatalf("via %v: %v", tc.via, err)
		}
		if c.Method() != tc.want {
			t.Errorf("via %v: method %s, want %s", tc.via, c.Method(), tc.want)
		}
		echoCheck(t, c, 1000)
		c.Close()
	}
}

// A dial via methods none of which can work toward the target tries
// nothing and says why of each (ErrNoneApplies); via the possible ones it
// gets through.
func TestDialMachineViaNoneApplies(t *testing.T) {
	h := testHub(t, "site")
	a := testNode(t, "a", h, Reverse, Routed)
	b := testNode(t, "b", h, Routed)
	serveEcho(t, b, 7000)
	waitResolvable(t, a, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := a.DialMachineVia(ctx, b.Machine(), 7000, Direct, Splice)
	var re *RaceError
	if !errors.Is(err, ErrNoneApplies) || !errors.Is(err, ErrNoMethod) || !errors.As(err, &re) || len(re.Errs) != 2 || re.Errs[Direct] == nil || re.Errs[Splice] == nil {
		t.Fatalf("via direct, splice (both disabled at a): %v, want ErrNoneApplies with both reasons", err)
	}
	c, err := a.DialMachineVia(ctx, b.Machine(), 7000, Direct, Reverse, Splice)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Method() != Reverse {
		t.Errorf("method %s, want reverse", c.Method())
	}
	if _, err := a.DialMachineVia(ctx, b.Machine(), 7000, Routed); errors.Is(err, ErrNoneApplies) || err != nil {
		t.Errorf("via routed: %v", err)
	}
}
