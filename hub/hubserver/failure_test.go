package hubserver

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/internal/testwait"
)

// echo serves circuits by echoing what it reads.
func echo(c *hub.Circuit) {
	defer c.Close()
	_, _ = io.Copy(c, c)
	c.CloseWrite()
}

// roundTrip writes msg and reads it back.
func roundTrip(t *testing.T, c *hub.Circuit, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
	buf := make([]byte, len(msg))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("read %q, %v; want %q", buf, err, msg)
	}
	c.SetReadDeadline(time.Time{})
}

func openTo(t *testing.T, from, to *hub.Session, port uint16) *hub.Circuit {
	t.Helper()
	c, err := from.Open(context.Background(), to.Machine(), port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readErr waits for a circuit to fail.
func readErr(t *testing.T, c *hub.Circuit) error {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if err == nil {
		t.Fatal("circuit ended cleanly, want an error")
	}
	return err
}

// Killing the middle hub of A-B-C resets the circuits through it, naming
// the lost link, and leaves its routes unreachable.
func TestHubDeath(t *testing.T) {
	g, a, b, c := line(t)
	na := g.node("na", "a")
	nc := g.node("nc", "c")
	serve(nc, 7, echo)
	cir := openTo(t, na, nc, 7)
	roundTrip(t, cir, "hello through b")

	b.crash()
	err := readErr(t, cir)
	expectErr(t, err, hub.ErrReset, "hub a: link to hub b (")
	if !strings.Contains(err.Error(), "lost") {
		t.Errorf("reset reason %q does not say the link was lost", err)
	}
	testwait.Until(t, "the routes through B to go unreachable", 5*time.Second, func() bool {
		rb, okb := a.route(b)
		rc, okc := a.route(c)
		ra, oka := c.route(a)
		return okb && okc && oka && !rb.Reachable() && !rc.Reachable() && rc.State%2 == 1 && !ra.Reachable()
	})
	cir2, err := na.Open(context.Background(), nc.Machine(), 7)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cir2.Read(make([]byte, 1))
	expectErr(t, err, hub.ErrUnreachable, "no route to hub c")
}

// carries reports whether any of th's links to other hubs carries a
// circuit.
func carries(th *testHub) bool {
	for _, l := range th.Status().Links {
		if l.Role == "hub" && l.Circuits > 0 {
			return true
		}
	}
	return false
}

// In a ring A-B-C-D-A (no A-C or B-D links), killing the hub A uses to
// reach C moves the route to the other side.
func TestRingReroute(t *testing.T) {
	g := newGrid(t)
	g.block("a", "c")
	g.block("b", "d")
	a := g.hub("a")
	b := g.hub("b", "a")
	c := g.hub("c", "b")
	d := g.hub("d", "c", "a")
	testwait.Until(t, "A's route to C", 10*time.Second, func() bool { r, ok := a.route(c); return ok && r.Reachable() && r.Hops == 2 })
	na := g.node("na", "a")
	nc := g.node("nc", "c")
	serve(nc, 7, echo)
	cir := openTo(t, na, nc, 7)
	roundTrip(t, cir, "before")
	// the hub the circuit crosses: A's route to C may still move between
	// B and D (both two hops) while D's links come up, so the route read
	// before the open is not the circuit's path (a CI run killed B under
	// a circuit through D and waited for a reset that could not come)
	via, other := b, d
	if carries(d) && !carries(b) {
		via, other = d, b
	} else if carries(d) == carries(b) {
		t.Fatalf("the circuit crosses B: %v, D: %v; want exactly one", carries(b), carries(d))
	}

	via.stop()
	expectErr(t, readErr(t, cir), hub.ErrReset, "hub "+via.name+" is shutting down")
	testwait.Until(t, "A to route to C through "+other.name, 10*time.Second, func() bool {
		r, _ := a.route(c)
		return r.Reachable() && r.NextHop == other.ID() && r.Hops == 2
	})
	cir2 := openTo(t, na, nc, 7)
	roundTrip(t, cir2, "after, through "+other.name)
	// the dead hub's route goes within the overlay's bound (issue 23: 2 s
	// plus an interval), not necessarily by the time the circuit is up:
	// a neighbour's older entry may pass through first (once in four
	// loaded runs: reachable at 3 hops just after the round trip)
	var r Route
	deadline := time.Now().Add(2*time.Second + testInterval)
	for r, _ = a.route(via); r.Reachable() && time.Now().Before(deadline); r, _ = a.route(via) {
		time.Sleep(10 * time.Millisecond)
	}
	if r.Reachable() {
		t.Errorf("dead hub %s still reachable %v after its death: %+v", via.name, 2*time.Second+testInterval, r)
	}
}

// A node whose hub dies re-attaches to the next hub; its circuits are
// reset.
func TestReattach(t *testing.T) {
	g := newGrid(t)
	a := g.hub("a")
	b := g.hub("b", "a")
	testwait.Until(t, "a and b linked", 10*time.Second, func() bool { r, ok := a.route(b); return ok && r.Reachable() })
	n := g.node("n", "a", "b")
	m := g.node("m", "b")
	serve(m, 7, echo)
	if n.Hub().ID != a.ID() {
		t.Fatalf("n attached to %s, want a", n.Hub().Name)
	}
	cir := openTo(t, n, m, 7)
	roundTrip(t, cir, "via a")

	a.stop()
	expectErr(t, readErr(t, cir), hub.ErrReset, "")
	testwait.Until(t, "n to re-attach to b", 10*time.Second, func() bool { return n.Hub().ID == b.ID() })
	if got := n.Machine(); got.Hub != b.ID() || got.HubName != "b" {
		t.Errorf("n's machine after re-attach: %+v", got)
	}
	ms, err := n.Lookup(context.Background(), "m")
	if err != nil || len(ms) != 1 {
		t.Fatalf("lookup after re-attach: %v %v", ms, err)
	}
	cir2 := openTo(t, n, m, 7)
	roundTrip(t, cir2, "via b")
	testwait.Until(t, "b to list n", 5*time.Second, func() bool {
		for _, x := range b.Nodes() {
			if x.Name == "n" && x.HubName == "b" {
				return true
			}
		}
		return false
	})
}

// A circuit whose reader stalls does not stall another circuit on the same
// links: the second transfers 64 MiB while the first stays blocked, and
// the hub holds no more than the stalled circuit's window for it. (On an
// in-memory network in a synctest bubble: the stall is exact, every
// goroutine blocked.)
func TestSlowReaderIsolation(t *testing.T) {
	synctest.Test(t, testSlowReaderIsolation)
}

func testSlowReaderIsolation(t *testing.T) {
	g := memGrid(t)
	h := g.hub("h")
	n1 := g.node("n1", "h")
	n2 := g.node("n2", "h")
	release := make(chan struct{})
	slowDone := make(chan int64, 1)
	fastDone := make(chan int64, 1)
	go func() {
		for in := range n2.Incoming() {
			in.Accept()
			c := in.Circuit
			if in.Open.Port == 1 {
				go func() {
					<-release
					n, _ := io.Copy(io.Discard, c)
					slowDone <- n
				}()
			} else {
				go func() { n, _ := io.Copy(io.Discard, c); fastDone <- n }()
			}
		}
	}()
	const size = 64 << 20
	slow := openTo(t, n1, n2, 1)
	slowWrote := make(chan error, 1)
	go func() {
		_, err := slow.Write(make([]byte, size))
		if err == nil {
			err = slow.CloseWrite()
		}
		slowWrote <- err
	}()
	synctest.Wait() // the slow circuit has filled its window
	select {
	case err := <-slowWrote:
		t.Fatalf("the slow circuit's writer finished (%v) though its reader never read", err)
	default:
	}

	fast := openTo(t, n1, n2, 2)
	if _, err := fast.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	fast.CloseWrite()
	select {
	case n := <-fastDone:
		if n != size {
			t.Fatalf("fast circuit carried %d bytes", n)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the fast circuit stalled behind the slow one")
	}
	select {
	case err := <-slowWrote:
		t.Fatalf("the slow circuit's writer finished (%v) though its reader never read", err)
	default:
	}
	for _, l := range h.Links() {
		if l.Queued > 2*hub.MaxData {
			t.Errorf("hub queues %d bytes toward %s", l.Queued, l.Name)
		}
	}
	close(release)
	if err := <-slowWrote; err != nil {
		t.Fatal(err)
	}
	if n := <-slowDone; n != size {
		t.Fatalf("slow circuit carried %d bytes", n)
	}
}

// Deadlines, Close with unread data (a reset, as in TCP) and closing the
// session. (On an in-memory network in a synctest bubble: the deadline
// ends the read exactly when it passes.)
func TestCircuitSemantics(t *testing.T) {
	synctest.Test(t, testCircuitSemantics)
}

func testCircuitSemantics(t *testing.T) {
	g := memGrid(t)
	g.hub("h")
	n1 := g.node("n1", "h")
	n2 := g.node("n2", "h")
	got := make(chan *hub.Circuit, 4)
	serve(n2, 9, func(c *hub.Circuit) { got <- c })
	c1 := openTo(t, n1, n2, 9)
	start := time.Now()
	c1.SetReadDeadline(start.Add(50 * time.Millisecond))
	var ne interface{ Timeout() bool }
	if _, err := c1.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past the deadline: %v", err)
	}
	if took := time.Since(start); took != 50*time.Millisecond {
		t.Errorf("the read ended %v after a deadline 50ms ahead", took)
	}
	c1.SetReadDeadline(time.Time{})
	if _, err := c1.Write([]byte("unread")); err != nil {
		t.Fatal(err)
	}
	peer := <-got
	synctest.Wait() // the bytes arrive, unread
	peer.Close()
	_, err := io.ReadAll(c1)
	expectErr(t, err, hub.ErrReset, "closed by n2")

	// A clean close: the peer reads EOF.
	c2 := openTo(t, n1, n2, 9)
	c2.Write([]byte("bye"))
	c2.Close()
	peer = <-got
	b, err := io.ReadAll(peer)
	if err != nil || string(b) != "bye" {
		t.Fatalf("after a clean close the peer read %q, %v", b, err)
	}
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Error("Read after Close worked")
	}
	peer.Close()

	// Closing the session resets its circuits and closes its channels.
	c3 := openTo(t, n1, n2, 9)
	roundTripPeer := <-got
	_ = roundTripPeer
	n1.Close()
	expectErr(t, readErr(t, c3), hub.ErrReset, "")
	if _, ok := <-n1.Incoming(); ok {
		t.Error("Incoming still open")
	}
	if _, err := n1.Lookup(context.Background(), "n2"); !errors.Is(err, hub.ErrClosed) {
		t.Errorf("lookup on a closed session: %v", err)
	}
}
