package hubserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/memnet"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/wire"
)

// One attachment per identity (oneid.go, wire/instance.go), on an
// in-memory network in synctest bubbles. Each test's processes are
// hub.Sessions of one set of credentials, as a user's agent and her
// `gridlink cp` with the same proxy are.

// cutConn is a node's connection to its hub that the test can cut: what
// the node writes then is lost, and closing it sends the hub nothing, as
// when the node's host vanished (the hub's end stays open and hears
// nothing). Cut with giveUp, the node's reads fail at once (its side of
// the link is gone: it re-attaches); without, they wait until it closes.
type cutConn struct {
	net.Conn
	mu     sync.Mutex
	cut    bool
	giveUp bool
	closed chan struct{}
}

var errCut = fmt.Errorf("cut by the test: %w", syscall.ECONNRESET)

func (c *cutConn) isCut() (cut, giveUp bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut, c.giveUp
}

func (c *cutConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if cut, giveUp := c.isCut(); cut {
		if giveUp {
			return 0, errCut
		}
		<-c.closed
		return 0, net.ErrClosed
	}
	return n, err
}

func (c *cutConn) Write(p []byte) (int, error) {
	if cut, _ := c.isCut(); cut {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *cutConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	if c.cut {
		return nil
	}
	return c.Conn.Close()
}

func (c *cutConn) SetDeadline(t time.Time) error {
	if cut, _ := c.isCut(); cut {
		return nil
	}
	return c.Conn.SetDeadline(t)
}

func (c *cutConn) SetReadDeadline(t time.Time) error {
	if cut, _ := c.isCut(); cut {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

// cutter dials a grid's hubs for one process and cuts its latest
// connection on demand.
type cutter struct {
	g    *grid
	mu   sync.Mutex
	last *cutConn
}

func (d *cutter) dial(ctx context.Context, spec string) (net.Conn, error) {
	c, err := d.g.dial(ctx, spec)
	if err != nil {
		return nil, err
	}
	cc := &cutConn{Conn: c, closed: make(chan struct{})}
	d.mu.Lock()
	d.last = cc
	d.mu.Unlock()
	return cc, nil
}

// cut cuts the latest connection; its blocked read wakes (by its
// deadline) and sees the cut.
func (d *cutter) cut(giveUp bool) {
	d.mu.Lock()
	c := d.last
	d.mu.Unlock()
	c.mu.Lock()
	c.cut, c.giveUp = true, giveUp
	c.mu.Unlock()
	_ = c.Conn.SetReadDeadline(time.Now())
}

// process starts a session of cr named name attaching to the grid's hub
// a through dial (nil: the grid's), in the background.
func process(t *testing.T, g *grid, cr *pki.Credentials, name string, dial func(context.Context, string) (net.Conn, error)) *hub.Session {
	t.Helper()
	if dial == nil {
		dial = g.dial
	}
	s, err := hub.Connect(hub.SessionConfig{Creds: cr, Machine: identity.Machine{Name: name}, Hubs: []string{g.get("a").Addr().String()}, Dial: dial, Logf: testLogf(t, name+": ")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func waitAttached(t *testing.T, s *hub.Session) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return s.WaitAttached(ctx)
}

// attachedHolder starts hub a (memGrid: call it first in the bubble)
// and a first process of new credentials, alice, attached there.
func attachedHolder(t *testing.T) (*grid, *pki.Credentials, *hub.Session) {
	t.Helper()
	g := memGrid(t)
	g.hub("a")
	cr := creds(t)
	first := process(t, g, cr, "alice", nil)
	if err := waitAttached(t, first); err != nil {
		t.Fatal(err)
	}
	return g, cr, first
}

// refusedAsAttached checks err, a second process's, as the refusal
// naming first (at hub a), and the hub's log line naming it too.
func refusedAsAttached(t *testing.T, g *grid, err error, first *hub.Session) {
	t.Helper()
	var re *hub.RefusedError
	if !errors.As(err, &re) || !errors.Is(err, hub.ErrIdentityAttached) || !errors.Is(err, hub.ErrPermanent) {
		t.Fatalf("second process: %v; want a refusal for good (hub.ErrIdentityAttached)", err)
	}
	at := first.Observed().String()
	for _, want := range []string{"another process with this identity", at, "attached to hub a since", "and it answers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if re.Holder.ID != first.Machine().ID || re.Holder.HubName != "a" {
		t.Errorf("the refusal names %v as the holder, want %s at a", re.Holder, first.Machine().ID.Short())
	}
	if g.logged.count("refused: another process with this identity, node alice") == 0 || g.logged.count("already runs at "+at) == 0 {
		t.Errorf("the hub's log does not name the refusal and the holder at %s:\n%s", at, strings.Join(g.logged.lines, "\n"))
	}
}

// A second live process with a node's identity is refused for good, the
// first named on both ends; the first keeps its attachment undisturbed
// (a circuit to it still works, the hub replaced nothing).
func TestSecondProcessRefused(t *testing.T) { synctest.Test(t, testSecondProcessRefused) }

func testSecondProcessRefused(t *testing.T) {
	g, cr, first := attachedHolder(t)
	serve(first, 7, echo)
	bob := g.node("bob", "a")
	before := openTo(t, bob, first, 7)
	roundTrip(t, before, "before the second process")

	start := time.Now()
	second := process(t, g, cr, "alice", nil)
	err := waitAttached(t, second)
	refusedAsAttached(t, g, err, first)
	if d := time.Since(start); d > 2*aliveWait {
		t.Errorf("the refusal took %v", d)
	}
	synctest.Wait() // its attach loop ends after it returns the refusal
	select {
	case <-second.GaveUp():
	default:
		t.Errorf("the refused process did not give up")
	}
	time.Sleep(10 * time.Second) // it does not come back
	synctest.Wait()
	roundTrip(t, before, "after the second process: the circuit set up before")
	roundTrip(t, openTo(t, bob, first, 7), "after the second process: a new circuit")
	if first.NotAttached() != nil {
		t.Errorf("the first process lost its hub: %v", first.NotAttached())
	}
	if n := g.logged.count("replaced by a new link") + g.logged.count("gone silent"); n != 0 {
		t.Errorf("the hub replaced the first process %d times", n)
	}
	if n := g.logged.count("refused: another process with this identity"); n != 1 {
		t.Errorf("the hub refused %d times, want once (no retry)", n)
	}
}

// A process that restarted takes its identity's place within 2 s when
// the old one is gone silent (its host vanished: nothing more heard,
// no FIN): the hub pings it, hears nothing within aliveWait, closes it.
func TestRestartedProcessAdmitted(t *testing.T) { synctest.Test(t, testRestartedProcessAdmitted) }

func testRestartedProcessAdmitted(t *testing.T) {
	g := memGrid(t)
	a := g.hub("a")
	cr := creds(t)
	d := &cutter{g: g}
	old := process(t, g, cr, "alice", d.dial)
	if err := waitAttached(t, old); err != nil {
		t.Fatal(err)
	}
	d.cut(false)
	old.Close() // killed: the hub hears nothing
	start := time.Now()
	restarted := process(t, g, cr, "alice", nil)
	if err := waitAttached(t, restarted); err != nil {
		t.Fatalf("the restarted process: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the restarted process attached after %v, want within 2 s", took)
	}
	if g.logged.count("gone silent: nothing heard within 1s of a ping") == 0 || g.logged.count("that one takes its place") != 1 {
		t.Errorf("the hub does not say the old one went silent:\n%s", strings.Join(g.logged.lines, "\n"))
	}
	bob := g.node("bob", "a")
	serve(restarted, 7, echo)
	roundTrip(t, openTo(t, bob, restarted, 7), "to the restarted process")
	if n := len(a.Nodes()); n != 2 {
		t.Errorf("%d nodes attached, want 2: %v", n, a.Nodes())
	}
}

// The same process re-attaching while the hub still holds its old link
// (the node gave up on it, the hub has not noticed) replaces it at once:
// its hello names the same instance, no liveness wait.
func TestSameProcessReattaches(t *testing.T) { synctest.Test(t, testSameProcessReattaches) }

func testSameProcessReattaches(t *testing.T) {
	g := memGrid(t)
	g.hub("a")
	d := &cutter{g: g}
	s := process(t, g, creds(t), "alice", d.dial)
	if err := waitAttached(t, s); err != nil {
		t.Fatal(err)
	}
	start, was := time.Now(), s.Observed()
	d.cut(true)
	testwait.Until(t, "the session to re-attach", 10*time.Second, func() bool {
		return s.NotAttached() == nil && s.Observed() != was
	})
	if took := time.Since(start); took >= aliveWait {
		t.Errorf("the same process re-attached after %v: it waited for the old link's silence", took)
	}
	if g.logged.count("(the same process: its hello names") != 1 || g.logged.count("gone silent") != 0 {
		t.Errorf("the hub's log:\n%s", strings.Join(g.logged.lines, "\n"))
	}
	bob := g.node("bob", "a")
	serve(s, 7, echo)
	roundTrip(t, openTo(t, bob, s, 7), "after the re-attachment")
}

// No eviction loop, whatever two processes with one identity do: they
// start at once, and the one refused starts again and again (a user
// running `gridlink cp` while her agent runs) for a minute. The one that
// attached first keeps its link; every other start is refused naming it.
func TestNoEvictionLoop(t *testing.T) { synctest.Test(t, testNoEvictionLoop) }

func testNoEvictionLoop(t *testing.T) {
	g := memGrid(t)
	g.hub("a")
	cr := creds(t)
	x, y := process(t, g, cr, "alice", nil), process(t, g, cr, "alice", nil)
	time.Sleep(5 * time.Second)
	if n := g.logged.count("replaced by a new link"); n > 1 {
		t.Fatalf("the two processes evicted each other %d times in 5 s", n)
	}
	errX, errY := waitAttached(t, x), waitAttached(t, y)
	first := x
	if errX != nil {
		first = y
		errX, errY = errY, errX
	}
	if errX != nil {
		t.Fatalf("neither process attached: %v; %v", errX, errY)
	}
	refusedAsAttached(t, g, errY, first)
	serve(first, 7, echo)
	bob := g.node("bob", "a")
	c := openTo(t, bob, first, 7)
	for i := range 30 {
		again := process(t, g, cr, "alice", nil)
		if err := waitAttached(t, again); !errors.Is(err, hub.ErrIdentityAttached) {
			t.Fatalf("start %d: %v; want the refusal", i, err)
		}
		again.Close()
		roundTrip(t, c, fmt.Sprintf("during start %d", i))
		time.Sleep(time.Second)
	}
	if n := g.logged.count("replaced by a new link") + g.logged.count("gone silent") + g.logged.count("re-attached from"); n != 0 {
		t.Errorf("the hub replaced an attachment %d times:\n%s", n, strings.Join(g.logged.lines, "\n"))
	}
	if first.NotAttached() != nil {
		t.Errorf("the first process lost its hub: %v", first.NotAttached())
	}
}

// A node older than wire.VersionInstance (no instance in its hello, and
// a decoder that knows no RefusedAttached) is refused as well while the
// holder answers, with the code it knows for a refusal for good
// (RefusedNameTaken) and the same words.
func TestOlderNodeRefusedForGood(t *testing.T) { synctest.Test(t, testOlderNodeRefusedForGood) }

func testOlderNodeRefusedForGood(t *testing.T) {
	g, cr, first := attachedHolder(t)
	_, err := olderNode(t, g, cr)
	if !errors.Is(err, hub.ErrNameTaken) || !errors.Is(err, hub.ErrPermanent) || !strings.Contains(err.Error(), "another process with this identity, node alice") {
		t.Errorf("an older node: %v; want a name-taken refusal for good naming the holder", err)
	}
	if first.NotAttached() != nil {
		t.Errorf("the holder lost its hub: %v", first.NotAttached())
	}
}

// olderNode attaches to hub a as a node of cr named alice older than
// wire.VersionInstance (no instance in its hello): its trunk, answering
// pings, or the hub's refusal.
func olderNode(t *testing.T, g *grid, cr *pki.Credentials) (*hub.Trunk, error) {
	t.Helper()
	c, err := g.dial(context.Background(), g.get("a").Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	sec, err := hub.Secure(context.Background(), cr, c, true, identity.ID{}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := hub.WriteHello(c, sec.Sealer, &wire.Hello{Role: "node", Machine: identity.Machine{ID: cr.Key.ID(), Name: "alice"}, Version: wire.VersionInstance - 1}); err != nil {
		t.Fatal(err)
	}
	if err := sec.Verdict(); err != nil {
		t.Fatal(err)
	}
	if _, err := sec.ReadHello(); err != nil {
		return nil, err
	}
	tr := hub.NewTrunk(c, sec.Sealer, "older node", false)
	go tr.ReadLoop(sec.Reader, func(wire.Frame) error { return nil })
	t.Cleanup(func() { tr.Close(nil) })
	return tr, nil
}

// An older node that moved to another hub keeps its link here while its
// circuits carry on, answering pings; coming back with no instance to
// show, it is let in as before rather than refused for good.
func TestOlderNodeBackFromMove(t *testing.T) { synctest.Test(t, testOlderNodeBackFromMove) }

func testOlderNodeBackFromMove(t *testing.T) {
	g := memGrid(t)
	a := g.hub("a")
	cr := creds(t)
	moved, err := olderNode(t, g, cr)
	if err != nil {
		t.Fatal(err)
	}
	moved.SendControl(&wire.Message{Kind: wire.KMoved, Moved: &wire.Moved{To: creds(t).Key.ID()}})
	testwait.Until(t, "the hub to take the move", 10*time.Second, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		p := a.nodes[cr.Key.ID()]
		return p != nil && !p.movedTo.IsZero()
	})
	if _, err := olderNode(t, g, cr); err != nil {
		t.Errorf("the older node back from its move: %v", err)
	}
}

// A hub older than wire.VersionInstance closes a link whose hello has an
// Instance (its strict decoder knows no such field): the session then
// sends it none, and attaches on its next attempt.
func TestInstanceNotSentToOlderHub(t *testing.T) { synctest.Test(t, testInstanceNotSentToOlderHub) }

func testInstanceNotSentToOlderHub(t *testing.T) {
	t.Cleanup(func() { time.Sleep(time.Minute) })
	var network memnet.Network
	ln, err := network.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hc := creds(t)
	var mu sync.Mutex
	var instances []string // of the hellos the old hub read
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sec, err := hub.Secure(context.Background(), hc, c, false, identity.ID{}, "")
				if err != nil || sec.Verdict() != nil {
					return
				}
				hello, err := hub.ReadHello(sec.Reader, sec.Peer)
				if err != nil {
					return
				}
				mu.Lock()
				instances = append(instances, hello.Instance)
				mu.Unlock()
				if hello.Instance != "" {
					return // as a strict decoder before VersionInstance does
				}
				me := identity.Machine{ID: hc.Key.ID(), Name: "old"}
				if hub.WriteHello(c, sec.Sealer, &wire.Hello{Role: "hub", Machine: me, Version: wire.VersionInstance - 1, Observed: hub.AddrPort(c.RemoteAddr())}) != nil {
					return
				}
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	s, err := hub.Connect(hub.SessionConfig{Creds: creds(t), Machine: identity.Machine{Name: "n"}, Hubs: []string{ln.Addr().String()}, Dial: network.Dial, Logf: testLogf(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := waitAttached(t, s); err != nil {
		t.Fatalf("not attached to the older hub: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(instances) != 2 || len(instances[0]) != wire.InstanceSize || instances[1] != "" {
		t.Errorf("the older hub read hellos with instances %q; want one with, then one without", instances)
	}
}
