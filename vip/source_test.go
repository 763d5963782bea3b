package vip

import (
	"testing"
	"testing/synctest"
	"time"
)

// Issue 35: a node whose hub died claims its addresses again at another
// hub, and the directory is without them meanwhile.

// withoutAddrs takes n's addresses out of the directory (the claim under
// way) and gives a func that puts them back.
func (g *grid) withoutAddrs(n *node) (back func()) {
	g.mu.Lock()
	delete(g.dir, n.v4)
	delete(g.dir, n.v6)
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.dir[n.v4], g.dir[n.v6] = n.id, n.id
		g.mu.Unlock()
	}
}

// The peer's connection is reset while its addresses are out of the
// directory: its packets on the next connection pass, the source the
// directory gave it before still its own.
func TestSourceKnownAcrossConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCutGrid(t)
		a, b := c.a, c.b
		c.connectThenCut(t)
		back := c.withoutAddrs(a)
		defer back()
		c.mend()
		again := udp4(a.v4, b.v4, "a to b on its next connection", 100)
		a.send(t, again)
		expect(t, b, again, "a's packet on its next connection, its addresses out of the directory")
		if s := b.net.Stats(); s.Drops.SpoofedSource != 0 {
			t.Errorf("b dropped %d of a's packets as spoofed", s.Drops.SpoofedSource)
		}
	})
}

// A peer's source the directory does not know yet is refused, and asked
// about again after sourceRetry: once the directory has it, the peer's
// packets pass.
func TestSourceUnknownAskedAgainSoon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGrid(t, 2, nil)
		a, b := g.nodes[0], g.nodes[1]
		back := g.withoutAddrs(a)
		a.send(t, udp4(a.v4, b.v4, "before the directory has a", 100))
		synctest.Wait()
		if s := b.net.Stats(); s.Drops.SpoofedSource != 1 {
			t.Fatalf("b's drops: %+v, want a's packet dropped as spoofed", s.Drops)
		}
		back()
		time.Sleep(sourceRetry)
		after := udp4(a.v4, b.v4, "once the directory has a", 100)
		a.send(t, after)
		expect(t, b, after, "a's packet once the directory has its address")
	})
}
