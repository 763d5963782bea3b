package hubserver

import (
	"context"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/memnet"
	"github.com/gridlink/gridlink/internal/testwait"
)

// Two hubs that dial each other keep one trunk, the one the smaller ID
// dialled. When that one arrives second, the first is replaced, but the
// circuits a node set up on it in between carry on (they were reset,
// naming a lost link: the cause of hubserver.TestHubDeathNamed's flakes);
// new circuits take the new trunk, and the old one is closed once its last
// circuit ends. (On an in-memory network in a synctest bubble.)
func TestReplacedTrunkKeepsItsCircuits(t *testing.T) {
	synctest.Test(t, testReplacedTrunkKeepsItsCircuits)
}

func testReplacedTrunkKeepsItsCircuits(t *testing.T) {
	var network memnet.Network
	// Last (the first cleanup runs last): the trunks' closing goroutines
	// (CloseAfterFlush) sleep too, and a bubble ends only once every
	// goroutine has.
	t.Cleanup(func() { time.Sleep(time.Minute) })
	listen := func() net.Listener {
		ln, err := network.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	ctx, cancel := context.WithCancel(context.Background())
	var logS, logL logCounter
	cs, cl := creds(t), creds(t)
	if minID(cs.Key.ID(), cl.Key.ID()) != cs.Key.ID() {
		cs, cl = cl, cs
	}
	s, err := New(Config{Name: "s", Creds: cs, Listener: listen(), Interval: testInterval, Logf: logS.logf})
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Name: "l", Creds: cl, Listener: listen(), Interval: testInterval, Logf: logL.logf,
		Peers: []string{s.Addr().String()}, Dial: network.Dial})
	if err != nil {
		t.Fatal(err)
	}
	// s dials l (the trunk both keep) only when the test says so.
	release := make(chan struct{})
	s.cfg.Peers = []string{l.Addr().String()}
	s.cfg.Dial = func(ctx context.Context, spec string) (net.Conn, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return network.Dial(ctx, spec)
	}
	var wg sync.WaitGroup
	for _, h := range []*Hub{s, l} {
		wg.Add(1)
		go func() { defer wg.Done(); h.Serve(ctx) }()
	}
	defer wg.Wait()
	defer cancel()
	testwait.Until(t, "l's trunk to s", 0, func() bool { return s.linkedTo(l.id) && l.linkedTo(s.id) })
	ns, nl := attachNodeDial(t, network.Dial, "ns", s.Addr().String()), attachNodeDial(t, network.Dial, "nl", l.Addr().String())
	serve(nl, 7, echo)
	testwait.Until(t, "ns resolving nl", 0, func() bool {
		c, err := ns.Open(context.Background(), nl.Machine(), 7)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	old := openTo(t, ns, nl, 7)
	roundTrip(t, old, "on the first trunk")

	close(release)
	testwait.Until(t, "both hubs to take s's trunk", 0, func() bool {
		return dialledBy(s, l.id) == s.id && dialledBy(l, s.id) == s.id
	})
	roundTrip(t, old, "still on the first trunk, after it was replaced")
	fresh := openTo(t, ns, nl, 7)
	roundTrip(t, fresh, "on the new trunk")
	if n := logS.count(errTrunkDrained.Error()) + logL.count(errTrunkDrained.Error()); n != 0 {
		t.Fatalf("the replaced trunk closed while it carried a circuit")
	}
	old.Close()
	testwait.Until(t, "the replaced trunk to close after its last circuit", 0, func() bool {
		return logS.count(errTrunkDrained.Error())+logL.count(errTrunkDrained.Error()) >= 1
	})
	roundTrip(t, fresh, "the new trunk is unaffected")
	replaced := "replaced by a newer trunk from"
	if logS.count(replaced) != 1 || logL.count(replaced) != 1 {
		t.Errorf("each hub should log the replacement once; logs:\ns: %q\nl: %q", logS.lines, logL.lines)
	}
	time.Sleep(3 * testInterval) // nothing more happens
	synctest.Wait()
	if !s.linkedTo(l.id) || !l.linkedTo(s.id) {
		t.Errorf("the hubs are no longer linked")
	}
}

// dialledBy is the hub that dialled h's trunk to hub id (zero if none).
func dialledBy(h *Hub, id identity.ID) identity.ID {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.hubs[id]; p != nil {
		return h.dialerOf(p)
	}
	return identity.ID{}
}
