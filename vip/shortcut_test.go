package vip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/tun"
	"github.com/gridlink/gridlink/vconn"
)

// methodConn is a pipe end that says how it was set up, as vconn.Conn
// does, and notes being closed.
type methodConn struct {
	net.Conn
	method vconn.Method
	dialer identity.ID
	closed atomic.Bool
}

func (c *methodConn) Method() vconn.Method { return c.method }

func (c *methodConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

// pathDialer dials over pipes: DialPeer gives routed connections,
// DialShortcut (when shortcuts is set) fails `fails` times and then gives
// direct ones. It records every connection (both ends).
type pathDialer struct {
	g    *grid
	from identity.ID

	// meetPeer and meetShortcut, when set, hold the first DialPeer and
	// DialShortcut until the other node's dialer calls it too: both
	// dial at once.
	meetPeer, meetShortcut *sync.WaitGroup

	mu         sync.Mutex
	fails      int
	shortTries int
	conns      []*methodConn
}

func (d *pathDialer) pipe(ctx context.Context, id identity.ID, m vconn.Method) (net.Conn, error) {
	d.g.mu.Lock()
	to := d.g.byID[id]
	d.g.mu.Unlock()
	if to == nil {
		return nil, fmt.Errorf("no node %s", id.Short())
	}
	a, b := net.Pipe()
	mine, theirs := &methodConn{Conn: a, method: m, dialer: d.from}, &methodConn{Conn: b, method: m, dialer: d.from}
	d.mu.Lock()
	d.conns = append(d.conns, mine, theirs)
	d.mu.Unlock()
	if err := to.net.Accept(theirs, d.from); err != nil {
		mine.Close()
		return nil, err
	}
	return mine, nil
}

func (d *pathDialer) DialPeer(ctx context.Context, id identity.ID) (net.Conn, error) {
	meet(&d.mu, &d.meetPeer)
	return d.pipe(ctx, id, vconn.Routed)
}

// meet waits at *wg, the first time only.
func meet(mu *sync.Mutex, wg **sync.WaitGroup) {
	mu.Lock()
	w := *wg
	*wg = nil
	mu.Unlock()
	if w != nil {
		w.Done()
		w.Wait()
	}
}

func (d *pathDialer) dialShortcut(ctx context.Context, id identity.ID) (net.Conn, error) {
	d.mu.Lock()
	d.shortTries++
	fail := d.fails > 0
	if fail {
		d.fails--
	}
	d.mu.Unlock()
	if fail {
		return nil, errors.New("test: no direct path yet")
	}
	meet(&d.mu, &d.meetShortcut)
	return d.pipe(ctx, id, vconn.Direct)
}

// shortcutDialer is a pathDialer that is a ShortcutDialer.
type shortcutDialer struct{ *pathDialer }

func withShortcuts(d *pathDialer) Dialer { return shortcutDialer{d} }

func (d shortcutDialer) DialShortcut(ctx context.Context, id identity.ID) (net.Conn, error) {
	return d.dialShortcut(ctx, id)
}

func (d *pathDialer) all() []*methodConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*methodConn(nil), d.conns...)
}

// pathGrid is two nodes whose dialers are pathDialers, made a Dialer by
// wrap[i] (nil: the pathDialer itself, without shortcuts).
func pathGrid(t *testing.T, wrap [2]func(*pathDialer) Dialer, fails int) (*grid, []*pathDialer) {
	var g *grid
	var ds []*pathDialer
	g = newGrid(t, 2, func(c *Config) {
		d := &pathDialer{from: c.ID, fails: fails}
		w := wrap[len(ds)]
		ds = append(ds, d)
		if w != nil {
			c.Dialer = w(d)
		} else {
			c.Dialer = d
		}
	})
	for _, d := range ds {
		d.g = g
	}
	return g, ds
}

// flow sends count numbered packets from one node to another, one a
// millisecond, and returns a function that waits for all of them at the
// far end (in any order, each once) and fails naming the missing ones.
func flow(t *testing.T, from, to *node, count int) func() {
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range count {
			p := udp4(from.v4, to.v4, fmt.Sprintf("n%06d", i), 200)
			if _, err := from.app.Write([][]byte{append(make([]byte, tun.Offset), p...)}, tun.Offset); err != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return func() {
		t.Helper()
		seen := make([]bool, count)
		got, reordered, last := 0, 0, -1
		for got < count {
			p := to.recv(t, fmt.Sprintf("packet %d of %d (received %d)", got, count, got))
			var i int
			if _, err := fmt.Sscanf(string(p[20:27]), "n%06d", &i); err != nil || i >= count {
				t.Fatalf("a packet not of the flow: %q", p[20:27])
			}
			if seen[i] {
				t.Fatalf("packet %d received twice", i)
			}
			if i < last {
				reordered++
			}
			seen[i], last = true, max(last, i)
			got++
		}
		<-sent
		t.Logf("%d packets, all received, %d out of order", count, reordered)
	}
}

// The first connection is routed; the shortcut dialer fails once, then
// gives a direct connection, which takes over the sending on both ends
// while packets flow both ways: none lost, the switch counted, the
// routed connection closed after the grace period.
func TestShortcutReplacesRoutedWithoutLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, ds := pathGrid(t, [2]func(*pathDialer) Dialer{withShortcuts, nil}, 1)
		a, b := g.nodes[0], g.nodes[1]
		first := udp4(a.v4, b.v4, "first", 100)
		a.send(t, first)
		expect(t, b, first, "a's first packet, over the routed connection")
		const count = 6000 // 6 s: the failed try at once, the direct one 2 s later, the grace 2 s after it
		waitAB := flow(t, a, b, count)
		waitBA := flow(t, b, a, count)
		waitAB()
		waitBA()
		synctest.Wait()
		for _, nd := range []*node{a, b} {
			other := g.nodes[1]
			if nd == b {
				other = a
			}
			ps := nd.net.Stats().Peer(other.id)
			if ps.Method != string(vconn.Direct) || ps.Switches != 1 || ps.Conns != 1 || ps.ConnLost != 0 || ps.QueueFull != 0 {
				t.Errorf("%s's peer %s: %+v; want direct after 1 switch, 1 connection, nothing lost", nd.id.Short(), other.id.Short(), ps)
			}
			if ps.SentPackets+ps.RecvPackets != 2*count+1 {
				t.Errorf("%s: sent %d, received %d; want %d each and the first", nd.id.Short(), ps.SentPackets, ps.RecvPackets, count)
			}
			if d := nd.net.Stats().Drops; d != (Drops{}) {
				t.Errorf("%s drops: %+v", nd.id.Short(), d)
			}
		}
		if ds[0].shortTries != 2 || ds[1].shortTries != 0 {
			t.Errorf("shortcut tries: a %d, b %d; want 2 (one failed) and 0", ds[0].shortTries, ds[1].shortTries)
		}
		for _, c := range append(ds[0].all(), ds[1].all()...) {
			if closed := c.closed.Load(); closed != (c.method == vconn.Routed) {
				t.Errorf("a %s connection dialed by %s: closed %v", c.method, c.dialer.Short(), closed)
			}
		}
	})
}

// A shortcut dialer that says no shortcut can apply is not asked again
// for shortcutMaxBackoff; the routed path carries on.
func TestNoShortcutBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := pathGrid(t, [2]func(*pathDialer) Dialer{func(d *pathDialer) Dialer { return noShortcut{d} }, nil}, 0)
		a, b := g.nodes[0], g.nodes[1]
		wait := flow(t, a, b, 10)
		wait()
		time.Sleep(shortcutMaxBackoff - time.Second)
		if ps := a.net.Stats().Peer(b.id); ps.ShortcutTries != 1 || ps.Method != string(vconn.Routed) {
			t.Errorf("a's peer b: %+v; want 1 try, routed", ps)
		}
	})
}

type noShortcut struct{ *pathDialer }

func (noShortcut) DialShortcut(ctx context.Context, id identity.ID) (net.Conn, error) {
	return nil, ErrNoShortcut
}

// Both ends dial each other at once and both try shortcuts at once: they
// settle on one connection, the one dialed by the lower identity, and
// close the others after the grace period; packets cross both ways
// throughout.
func TestSimultaneousDialsSettleOnOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, ds := pathGrid(t, [2]func(*pathDialer) Dialer{withShortcuts, withShortcuts}, 0)
		a, b := g.nodes[0], g.nodes[1]
		var meetPeer, meetShortcut sync.WaitGroup
		meetPeer.Add(2)
		meetShortcut.Add(2)
		for _, d := range ds {
			d.meetPeer, d.meetShortcut = &meetPeer, &meetShortcut
		}
		waitAB := flow(t, a, b, 3000)
		waitBA := flow(t, b, a, 3000)
		waitAB()
		waitBA()
		synctest.Wait()
		low := a.id
		if bytes.Compare(b.id[:], a.id[:]) < 0 {
			low = b.id
		}
		open := 0
		for _, c := range append(ds[0].all(), ds[1].all()...) {
			if c.closed.Load() {
				continue
			}
			open++
			if c.method != vconn.Direct || c.dialer != low {
				t.Errorf("open: a %s connection dialed by %s; want the direct one dialed by %s", c.method, c.dialer.Short(), low.Short())
			}
		}
		if open != 2 { // the two ends of one pipe
			t.Errorf("%d connection ends open, want the 2 of one connection", open)
		}
		for _, nd := range []*node{a, b} {
			for _, ps := range nd.net.Stats().Peers {
				if ps.Conns != 1 || ps.Method != string(vconn.Direct) || ps.ConnLost != 0 {
					t.Errorf("%s's peer %s: %+v", nd.id.Short(), ps.ID.Short(), ps)
				}
			}
		}
		if n := len(ds[0].all()) + len(ds[1].all()); n != 8 {
			t.Errorf("%d connection ends, want 8: each node dialed a routed and a direct connection", n)
		}
	})
}

// blackhole is a connection whose far end takes every byte and never
// answers: a connection that died without either end seeing it.
func blackhole() net.Conn {
	mine, theirs := net.Pipe()
	go io.Copy(io.Discard, theirs)
	return mine
}

// The connection a node sends on is stale (the peer lost it without
// the node seeing it) and the peer dials again, routed: the node first
// keeps its better connection and retires the new one, then sees the
// peer send only on the new one, takes the stale one for dead, closes it
// and answers on the new one.
func TestStaleBestGivesWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, ds := pathGrid(t, [2]func(*pathDialer) Dialer{nil, nil}, 0)
		a, b := g.nodes[0], g.nodes[1]
		stale := &methodConn{Conn: blackhole(), method: vconn.Direct, dialer: b.id}
		if err := a.net.Accept(stale, b.id); err != nil {
			t.Fatal(err)
		}
		const count = 4000
		waitBA := flow(t, b, a, count) // b dials a, routed
		waitBA()
		replies := 0
		for i := 0; replies == 0; i++ {
			p := udp4(a.v4, b.v4, fmt.Sprint("reply ", i), 100)
			a.send(t, p)
			time.Sleep(100 * time.Millisecond)
			for len(b.in) > 0 {
				<-b.in
				replies++
			}
			if i > 100 {
				t.Fatalf("no reply from a reached b in 10 s")
			}
		}
		if !stale.closed.Load() {
			t.Errorf("the stale connection is open")
		}
		for _, c := range ds[1].all() {
			if c.closed.Load() {
				t.Errorf("b's routed connection (%s) closed", c.method)
			}
		}
		if ps := a.net.Stats().Peer(b.id); ps.Method != string(vconn.Routed) || ps.Conns != 1 {
			t.Errorf("a's peer b: %+v; want the routed connection only", ps)
		}
	})
}

// After a switch, what the peer sent on the old connection while it
// switched (in flight) does not make the old one look like the peer's
// choice: a one-way flow stays on the shortcut and the routed
// connection closes.
func TestInFlightOnOldConnKeepsShortcut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, ds := pathGrid(t, [2]func(*pathDialer) Dialer{withShortcuts, nil}, 0)
		a, b := g.nodes[0], g.nodes[1]
		first := udp4(a.v4, b.v4, "first", 100)
		a.send(t, first)
		expect(t, b, first, "a's first packet")
		synctest.Wait() // the shortcut is up, a and b switched
		if ps := a.net.Stats().Peer(b.id); ps.Method != string(vconn.Direct) {
			t.Fatalf("a's peer b: %+v; want direct", ps)
		}
		// b's end of the routed connection: one packet b "had in flight".
		bRouted := ds[0].all()[1] // the far end of a's first dial
		if bRouted.method != vconn.Routed {
			t.Fatalf("a's first dial was %s", bRouted.method)
		}
		residue := udp4(b.v4, a.v4, "in flight", 100)
		time.Sleep(10 * time.Millisecond) // it arrives after the switch
		if _, err := bRouted.Write(frames(residue)); err != nil {
			t.Fatal(err)
		}
		expect(t, a, residue, "b's packet in flight on the routed connection")
		waitAB := flow(t, a, b, 3000) // one way, b silent
		waitAB()
		synctest.Wait()
		ps := a.net.Stats().Peer(b.id)
		if ps.Method != string(vconn.Direct) || ps.Switches != 1 || ps.Conns != 1 {
			t.Errorf("a's peer b: %+v; want still direct after 1 switch, the routed connection gone", ps)
		}
		for _, c := range ds[0].all() {
			if c.closed.Load() != (c.method == vconn.Routed) {
				t.Errorf("a %s connection: closed %v", c.method, c.closed.Load())
			}
		}
	})
}

// The tries of a shortcut stop when the peer is idle and start again
// with its next packet.
func TestShortcutTriesStopWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := pathGrid(t, [2]func(*pathDialer) Dialer{withShortcuts, nil}, 1<<30)
		a, b := g.nodes[0], g.nodes[1]
		p := udp4(a.v4, b.v4, "once", 100)
		a.send(t, p)
		expect(t, b, p, "a's packet")
		time.Sleep(3 * time.Minute) // idle for longer than shortcutIdle and a backoff
		idle := a.net.Stats().Peer(b.id).ShortcutTries
		time.Sleep(10 * time.Minute)
		if again := a.net.Stats().Peer(b.id).ShortcutTries; again != idle || idle < 3 {
			t.Fatalf("tries: %d after the peer went idle, %d ten minutes later; want a few, then none", idle, again)
		}
		a.send(t, p)
		expect(t, b, p, "a's packet after the pause")
		time.Sleep(61 * time.Second) // the longest backoff
		if ps := a.net.Stats().Peer(b.id); ps.ShortcutTries == idle || ps.ShortcutError == "" || ps.Method != string(vconn.Routed) {
			t.Errorf("after the next packet: %+v; want the tries started again, failing, routed", ps)
		}
	})
}
