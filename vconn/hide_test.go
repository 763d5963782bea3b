package vconn

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"
)

// A node never dials a target at an address in its hidden networks (a
// virtual network carried over the overlay): direct has no address left
// and the race takes another method; nor does it count them as its own.
func TestHide(t *testing.T) {
	h := testHub(t, "site")
	hide := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	cfg := Config{Name: "a", Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1", HeadStart: 200 * time.Millisecond, Hide: hide}
	a, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := testNode(t, "b", h)
	serveEcho(t, b, 7000)
	waitResolvable(t, a, "b")
	for _, p := range a.localPrefixes() {
		if p.Addr().Is4() && p.Addr().IsLoopback() {
			t.Errorf("local prefixes list the hidden %s", p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = a.DialMachineVia(ctx, b.Machine(), 7000, Direct)
	var re *RaceError
	if !errors.Is(err, ErrNoneApplies) || !errors.As(err, &re) || !errors.Is(re.Errs[Direct], ErrNoAddress) {
		t.Fatalf("direct to a target whose only address is hidden: %v, want no address (ErrNoneApplies)", err)
	}
	c, err := a.Dial(ctx, "b:7000")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Method() == Direct {
		t.Errorf("dialled b directly at a hidden address")
	}
	echoCheck(t, c, 1000)
}
