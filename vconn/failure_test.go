package vconn

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/wire"
)

// A dial toward a node whose hub the overlay no longer reaches fails at
// once for every method that goes through the hubs, each naming the hubs'
// reason (issue 17: a splice waited 5 s for an answer although the routed
// attempt's error already said "no route to hub"): the hub that cannot
// forward a splice offer answers it, as it answers a reverse request.
func TestNoHubRouteEndsEveryMethod(t *testing.T) {
	ha := testHub(t, "fa")
	key, _ := identity.NewKey()
	creds, _ := pki.NewCredentials(key)
	hb, err := hubserver.New(hubserver.Config{Name: "fb", Creds: creds, Listen: "127.0.0.1:0", Peers: []string{ha.Addr().String()}, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stopB := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = hb.Serve(ctx); close(done) }()
	t.Cleanup(func() { stopB(); <-done })

	a := testNode(t, "a", ha, Reverse, Splice, Routed)
	b := testNode(t, "b", hb, Reverse, Splice, Routed)
	serveEcho(t, b, 7000)
	waitResolvable(t, a, "b")
	bm, err := a.Resolve(context.Background(), identity.Addr{Node: "b"})
	if err != nil {
		t.Fatal(err)
	}
	stopB()
	<-done
	// until hub fa has dropped its route to fb
	testwait.Until(t, "hub fa to drop its route to fb", 10*time.Second, func() bool {
		_, err := a.Try(context.Background(), Routed, bm, 7000)
		if !errors.Is(err, ErrNoHubRoute) {
			t.Logf("routed to b after its hub stopped: %v", err)
			return false
		}
		return true
	})
	dctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = a.DialMachine(dctx, bm, 7000)
	if err == nil {
		t.Fatal("dial reached b, whose hub is gone")
	}
	t.Logf("dial: %v", err)
	if strings.Contains(err.Error(), "did not answer the splice offer") || strings.Contains(err.Error(), "did not call back") {
		t.Errorf("a method waited out its time-out although the hubs said why it cannot work: %v", err)
	}
	for _, m := range []Method{Reverse, Splice, Routed} {
		_, err := a.Try(dctx, m, bm, 7000)
		var me *MethodError
		if !errors.As(err, &me) || me.End != Path || !errors.Is(err, ErrNoHubRoute) || !strings.Contains(err.Error(), "no route to hub fb") {
			t.Errorf("%s: %v; want the hubs' reason, no route to hub fb, at the path", m, err)
		}
		if why := Explain(m, err, a.Facts(bm)); !strings.Contains(why, "the hubs have no route between the two sites") {
			t.Errorf("%s explained: %s", m, why)
		}
	}
}

// The words of a diagnosis follow the facts: the end a failure's cause
// lies at and what was measured there, and the ends' NAT observations,
// whatever the error's text says (issue 17: a public target was called
// non-routed, a NATed one non-routed, and a target's random NAT this
// host's).
func TestExplainFromFacts(t *testing.T) {
	ap := netip.MustParseAddrPort
	public := identity.Machine{Addrs: []netip.AddrPort{ap("198.51.100.11:7000")}}
	natted := identity.Machine{Addrs: []netip.AddrPort{ap("192.168.1.10:7000")}, NAT: netip.MustParseAddr("198.51.100.161")}
	nonRouted := identity.Machine{Addrs: []netip.AddrPort{ap("10.4.0.11:7000")}}
	// the target's words, which say "this host" of itself
	theirs := errors.New("cannot predict this host's endpoint: this host's NAT is random")
	fromTarget := func(code string) error {
		return fmt.Errorf("%w: b says: %w", errSpliceImpossible, &failError{code: code, reason: theirs.Error()})
	}
	n := &Node{}
	cases := []struct {
		name   string
		m      Method
		err    error
		f      Facts
		end    End
		has    []string
		hasNot []string
	}{
		{"NATed target, direct", Direct, methodErr(Direct, Remote, ErrRejected, errors.New("connect: network is unreachable")),
			Facts{Local: public, Target: natted, LocalRouted: true}, Remote,
			[]string{"the target is behind a NAT", "198.51.100.161"}, []string{"non-routed", "this host"}},
		{"public target from a non-routed host, direct", Direct, methodErr(Direct, Local, ErrNoRoute, errors.New("connect: network is unreachable")),
			Facts{Local: nonRouted, Target: public}, Local,
			[]string{"this host has no route", "non-routed"}, []string{"the target is"}},
		{"public target from a non-routed host, reverse", Reverse, n.classify(Reverse, &failError{code: wire.FailUnreachable, reason: "das3v cannot reach a: network is unreachable"}),
			Facts{Local: nonRouted, Target: public}, Local,
			[]string{"this host's addresses (10.4.0.11) are private", "no default route"}, []string{"the target is", "the target has"}},
		{"non-routed target, reverse", Reverse, n.classify(Reverse, &failError{code: wire.FailNoRoute, reason: "g5k-n1 cannot reach a: network is unreachable"}),
			Facts{Local: public, Target: nonRouted, LocalRouted: true}, Remote,
			[]string{"the target has no route to this host", "the target is on a non-routed network"}, []string{"this host is", "this host has"}},
		{"random NAT at the target", Splice, n.classify(Splice, fromTarget(wire.FailNATRandom)),
			Facts{Local: public, Target: natted, LocalRouted: true}, Remote,
			[]string{"the target's NAT picks its ports at random"}, []string{"this host"}},
		{"no hub route", Splice, n.classify(Splice, fromTarget(wire.FailNoHubRoute)),
			Facts{Local: public, Target: natted, LocalRouted: true}, Path,
			[]string{"the hubs have no route"}, nil},
	}
	for _, c := range cases {
		var me *MethodError
		if !errors.As(c.err, &me) || me.End != c.end {
			t.Errorf("%s: %#v, want end %s", c.name, c.err, c.end)
		}
		why := Explain(c.m, c.err, c.f)
		for _, s := range c.has {
			if !strings.Contains(why, s) {
				t.Errorf("%s: %q does not say %q", c.name, why, s)
			}
		}
		for _, s := range c.hasNot {
			if strings.Contains(why, s) {
				t.Errorf("%s: %q says %q", c.name, why, s)
			}
		}
	}
	// a non-routed host that published so hears it once, not twice.
	published := nonRouted
	published.NonRouted = true
	err := n.classify(Reverse, &failError{code: wire.FailUnreachable, reason: "das3v cannot reach a: network is unreachable"})
	if why := Explain(Reverse, err, Facts{Local: published, Target: public}); strings.Count(why, "no default route") != 1 {
		t.Errorf("reverse from a published non-routed host: %q, want \"no default route\" once", why)
	}
}
