package hubserver

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/nat"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/wire"
)

// trunkTo is h's peer for the trunk to hub id (nil if none).
func trunkTo(h *Hub, id identity.ID) *peer {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hubs[id]
}

// laneLoads lists how many circuits each connection of p's trunk carries.
func laneLoads(p *peer) []int {
	p.cmu.Lock()
	defer p.cmu.Unlock()
	var out []int
	for _, l := range p.lanes {
		out = append(out, l.n)
	}
	return out
}

// waitLanes waits until hub from's trunk to hub to carries n connections
// on both ends.
func waitLanes(t *testing.T, from, to *Hub, n int) {
	t.Helper()
	testwait.Until(t, fmt.Sprintf("the trunk %s-%s to carry %d connections", from.Name(), to.Name(), n), 10*time.Second, func() bool {
		a, b := trunkTo(from, to.ID()), trunkTo(to, from.ID())
		return a != nil && b != nil && a.laneCount() == n && b.laneCount() == n
	})
}

// Circuits between two hubs whose trunk carries several connections are
// spread over them (each circuit on one, both ways), and every byte
// arrives intact and in order.
func TestTrunkLanesCarryCircuits(t *testing.T) {
	g := newGrid(t)
	g.lanes = 4
	a := g.hub("a")
	b := g.hub("b", "a")
	waitLanes(t, b.Hub, a.Hub, 4)
	if l := b.Links()[0]; l.Connections != 4 {
		t.Fatalf("b's link to a: %+v, want 4 connections", l)
	}
	na, nb := g.node("na", "a"), g.node("nb", "b")
	const circuits, size = 8, 2 << 20
	type result struct {
		n   int64
		sum [32]byte
		err error
	}
	got := make(chan result, circuits)
	release := make(chan struct{})
	serve(nb, 7000, func(c *hub.Circuit) {
		defer c.Close()
		n, sum, err := recvHash(c)
		<-release // keep every circuit open until all are counted
		got <- result{n, sum, err}
	})
	sums := make(map[[32]byte]bool)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range circuits {
		c, err := na.Open(context.Background(), nb.Machine(), 7000)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			sum, err := sendHash(c, byte(i), size)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			sums[sum] = true
			mu.Unlock()
			c.CloseWrite()
		}()
	}
	wg.Wait()
	testwait.Until(t, "the circuits to be switched", 10*time.Second, func() bool {
		n := 0
		for _, k := range laneLoads(trunkTo(a.Hub, b.ID())) {
			n += k
		}
		return n == circuits
	})
	// a opened them toward b: spread evenly over the four connections.
	for _, p := range []*peer{trunkTo(a.Hub, b.ID()), trunkTo(b.Hub, a.ID())} {
		if loads := laneLoads(p); len(loads) != 4 || loads[0] != 2 || loads[1] != 2 || loads[2] != 2 || loads[3] != 2 {
			t.Errorf("%s: circuits per connection %v, want [2 2 2 2]", p.t.Desc(), loads)
		}
	}
	close(release)
	for range circuits {
		r := <-got
		if r.err != nil || r.n != size || !sums[r.sum] {
			t.Fatalf("received %d bytes (%v), sum known: %v", r.n, r.err, sums[r.sum])
		}
	}
}

// A connection of a trunk that fails takes only its own circuits with it
// (reset, naming the lost connection); the others carry on, and the
// trunk's dialler dials the connection again.
func TestTrunkLaneLossResetsItsCircuits(t *testing.T) {
	g := newGrid(t)
	g.lanes = 2
	a := g.hub("a")
	b := g.hub("b", "a")
	waitLanes(t, b.Hub, a.Hub, 2)
	na, nb := g.node("na", "a"), g.node("nb", "b")
	echo := func(c *hub.Circuit) {
		defer c.Close()
		buf := make([]byte, 1024)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
	}
	serve(nb, 7000, echo)
	var cs []*hub.Circuit
	for range 2 {
		c, err := na.Open(context.Background(), nb.Machine(), 7000)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	roundTrip := func(c *hub.Circuit) error {
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 4)
		_, err := c.Read(buf)
		return err
	}
	for _, c := range cs {
		if err := roundTrip(c); err != nil {
			t.Fatal(err)
		}
	}
	pa := trunkTo(a.Hub, b.ID())
	if loads := laneLoads(pa); loads[0] != 1 || loads[1] != 1 {
		t.Fatalf("circuits per connection %v, want [1 1]", loads)
	}
	pa.extraLanes()[0].t.Conn().Close() // the second connection dies
	var lost, kept int
	for _, c := range cs {
		err := roundTrip(c)
		switch {
		case err == nil:
			kept++
		case errors.Is(err, hub.ErrReset) && strings.Contains(err.Error(), "connection of the trunk"):
			lost++
		default:
			t.Fatalf("circuit on the lost connection: %v, want a reset naming the lost connection of the trunk", err)
		}
	}
	if lost != 1 || kept != 1 {
		t.Fatalf("%d circuits lost, %d kept: want 1 and 1", lost, kept)
	}
	waitLanes(t, b.Hub, a.Hub, 2)
	c, err := na.Open(context.Background(), nb.Machine(), 7000)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c); err != nil {
		t.Fatal(err)
	}
}

// A hub that keeps one connection per trunk (as a hub of protocol version
// 2 does) refuses a further one, naming why, and the trunk goes on with
// one; a dialler whose peer hub speaks version 2 never asks.
func TestTrunkLanesOneConnectionPeer(t *testing.T) {
	var logs logBuf
	a := startHub(t, Config{Name: "a", Creds: creds(t), Lanes: 1, Logf: logs.logf})
	b := startHub(t, Config{Name: "b", Creds: creds(t), Lanes: 3, Peers: []string{a.Addr().String()}, Logf: testLogf(t, "")})
	testwait.Until(t, "b's refused connection to be logged by a", 10*time.Second, func() bool {
		return logs.has("refused: hub a keeps one connection per trunk")
	})
	if p := trunkTo(b, a.ID()); p == nil || p.laneCount() != 1 {
		t.Fatal("b's trunk to a does not run on one connection")
	}
	na := attachNode(t, "na", a.Addr().String())
	nb := attachNode(t, "nb", b.Addr().String())
	serve(nb, 7000, func(c *hub.Circuit) { c.Write([]byte("ok")); c.Close() })
	testwait.Until(t, "a route from a to b", 10*time.Second, func() bool { return a.nextHop(b.ID()) != nil })
	c, err := na.Open(context.Background(), nb.Machine(), 7000)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	// an older peer (version 2): no lanes wanted at all.
	p := trunkTo(b, a.ID())
	old := &peer{isHub: true, dialed: true, spec: p.spec, version: wire.VersionVirtual, t: p.t}
	if n := b.lanesWanted(old); n != 1 {
		t.Fatalf("connections wanted toward a version 2 hub: %d, want 1", n)
	}
	old.version = wire.VersionLanes
	if n := b.lanesWanted(old); n != 3 {
		t.Fatalf("connections wanted toward a version 3 hub: %d, want 3", n)
	}
	// behind a NAT that allocates ports in sequence: one (each dial
	// would move the counter splices predict).
	b.mu.Lock()
	b.nat = hubNAT{class: nat.Class{Allocation: nat.Sequential, Delta: 1}, at: time.Now()}
	b.mu.Unlock()
	if n := b.lanesWanted(old); n != 1 {
		t.Fatalf("connections wanted behind a sequential NAT: %d, want 1", n)
	}
}

// A trunk between a hub of protocol version 3 and one of version 2 (which
// knows no lanes: its strict decoder would refuse a join's hello) keeps
// one connection, whichever dialled it, and carries circuits as before.
func TestTrunkLanesOlderPeer(t *testing.T) {
	for _, oldDials := range []bool{false, true} {
		t.Run(map[bool]string{false: "new dials old", true: "old dials new"}[oldDials], func(t *testing.T) {
			var logs logBuf
			start := func(name string, old bool, peers ...string) *Hub {
				cfg := Config{Name: name, Creds: creds(t), Lanes: 3, Peers: peers, Logf: logs.logf, Listen: "127.0.0.1:0", Interval: testInterval}
				h, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				if old {
					h.version = wire.VersionVirtual
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- h.Serve(ctx) }()
				t.Cleanup(func() { cancel(); <-done })
				return h
			}
			a := start("a", !oldDials)
			b := start("b", oldDials, a.Addr().String())
			testwait.Until(t, "a route from a to b", 10*time.Second, func() bool { return a.nextHop(b.ID()) != nil && b.nextHop(a.ID()) != nil })
			time.Sleep(5 * testInterval) // ticks that would dial further connections
			for _, h := range []*Hub{a, b} {
				for _, l := range h.Links() {
					if l.Connections != 1 {
						t.Fatalf("hub %s: %+v, want one connection to a hub of version 2", h.Name(), l)
					}
				}
			}
			if logs.has("refused") {
				t.Fatalf("a join was asked of a hub of version 2: %v", logs.lines)
			}
			na := attachNode(t, "na", a.Addr().String())
			nb := attachNode(t, "nb", b.Addr().String())
			serve(nb, 7000, func(c *hub.Circuit) { c.Write([]byte("ok")); c.Close() })
			c, err := na.Open(context.Background(), nb.Machine(), 7000)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// startHub runs a hub on loopback until the test ends (cfg's Listen and
// Interval filled in).
func startHub(t *testing.T, cfg Config) *Hub {
	t.Helper()
	cfg.Listen, cfg.Interval = "127.0.0.1:0", testInterval
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

// joinLane asks hub to take a connection as a further lane of a trunk,
// with creds and the name name, proving it with proof(the connection's
// lane secret).
func joinLane(t *testing.T, creds *pki.Credentials, name string, to *Hub, proof func(lane []byte) []byte) error {
	t.Helper()
	return sendHello(t, creds, to, ca.Hub, func(sec *hub.Secured) *wire.Hello {
		mine, err := sec.LaneSecret()
		if err != nil {
			t.Fatal(err)
		}
		return &wire.Hello{Role: "hub", Machine: identity.Machine{ID: creds.Key.ID(), Name: name}, Version: wire.Version, Lane: &wire.LaneJoin{Proof: proof(mine)}}
	})
}

// sendHello runs a link's handshake with hub to (as a peer of role, ""
// for any) and sends it the hello made after the handshake; the error is
// what the hub's answer says (nil: its hello).
func sendHello(t *testing.T, creds *pki.Credentials, to *Hub, role ca.Role, hello func(*hub.Secured) *wire.Hello) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := net.Dial("tcp", to.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sec, err := hub.Secure(ctx, creds, c, true, to.ID(), role)
	if err != nil {
		return err
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := hub.WriteHello(c, sec.Sealer, hello(sec)); err != nil {
		return sec.Explain(err)
	}
	if err := sec.Verdict(); err != nil {
		return err
	}
	_, err = sec.ReadHello()
	return err
}

// Attack: joining someone else's trunk between two hubs. A stranger
// cannot finish the handshake; another member (a node, a hub without a
// trunk there, a hub with a trunk of its own, the trunk's own peer with a
// proof made for another connection, the hub that accepted the trunk)
// is refused, and the refused end's error and the refusing hub's log
// name the same reason. The trunk's real dialler with the right proof
// joins.
func TestTrunkLaneJoinRefused(t *testing.T) {
	g := pkitest.New(t, "grid")
	var logs logBuf
	start := func(name string, lanes int, peers ...string) (*Hub, *pki.Credentials) {
		cr := g.Member(t, ca.Hub, name)
		return startHub(t, Config{Name: name, Creds: cr, Peers: peers, Logf: logs.logf, Lanes: lanes}), cr
	}
	a, _ := start("a", 2)
	b, bCreds := start("b", 2, a.Addr().String())
	c, cCreds := start("c", 1, a.Addr().String()) // c's trunk to a: one connection
	waitLanes(t, b, a, 2)
	testwait.Until(t, "c to link to a", 10*time.Second, func() bool { return trunkTo(a, c.ID()) != nil })
	random := func([]byte) []byte {
		p := make([]byte, wire.LaneProofSize)
		rand.Read(p)
		return p
	}
	trunkBA := trunkTo(b, a.ID())
	replayed := func([]byte) []byte { // right trunk, bound to another connection
		other := make([]byte, wire.LaneProofSize)
		rand.Read(other)
		return hub.LaneProof(trunkBA.laneSecret, other)
	}
	right := func(lane []byte) []byte { return hub.LaneProof(trunkBA.laneSecret, lane) }

	for _, o := range g.Outsiders(t) {
		err := joinLane(t, o.Creds, "b", a, right)
		if !errors.Is(err, pki.ErrDenied) {
			t.Errorf("stranger (%s): %v, want refused by the handshake", o.Case, err)
		}
	}
	node := g.Member(t, ca.Node, "n1")
	err := joinLane(t, node, "n1", a, random)
	var re *hub.RefusedError
	if !errors.As(err, &re) || !errors.Is(err, hub.ErrWrongRole) || !logs.has(re.Reason) {
		t.Errorf("a node asking to join a trunk: %v, want a role refusal a logs too", err)
	}
	cases := []struct {
		what  string
		creds *pki.Credentials
		name  string
		to    *Hub
		proof func([]byte) []byte
		want  string
	}{
		{"a hub without a trunk there", g.Member(t, ca.Hub, "d"), "d", a, random, "has no trunk with hub d to join"},
		{"a hub with a trunk of its own", cCreds, "c", a, random, "proof does not match"},
		{"the trunk's peer with a proof for another connection", bCreds, "b", a, replayed, "proof does not match"},
	}
	for _, tc := range cases {
		err := joinLane(t, tc.creds, tc.name, tc.to, tc.proof)
		re = nil
		if !errors.As(err, &re) || !errors.Is(err, hub.ErrLaneRefused) || !strings.Contains(re.Reason, tc.want) {
			t.Errorf("%s: %v, want a lane refusal naming %q", tc.what, err, tc.want)
			continue
		}
		if !logs.has("refused: " + re.Reason) {
			t.Errorf("%s: the refusing hub did not log %q", tc.what, re.Reason)
		}
	}
	// the hub that accepted the trunk cannot add connections to it.
	aCreds := a.cfg.Creds
	err = joinLane(t, aCreds, "a", b, func(lane []byte) []byte { return hub.LaneProof(trunkTo(a, b.ID()).laneSecret, lane) })
	re = nil
	if !errors.As(err, &re) || !strings.Contains(re.Reason, "only a trunk's dialler adds connections") {
		t.Errorf("the accepting hub adding a connection: %v", err)
	}
	if n := trunkTo(a, b.ID()).laneCount(); n != 2 {
		t.Fatalf("a's trunk to b carries %d connections after the attempts, want 2", n)
	}
	// b itself, with the right proof: joins (the connection then closes
	// with this test's end, and the trunk goes on).
	if err := joinLane(t, bCreds, "b", a, right); err != nil {
		t.Fatalf("the trunk's dialler with the right proof: %v", err)
	}
}
