package vip

import (
	"net"
	"net/netip"
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

// A peer that opens many connections and cycles source addresses on each
// gets no more directory lookups than on one: the bound is the peer's,
// across its connections (each connection had a limiter of its own).
func TestPeerCyclingSourcesAcrossConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGrid(t, 2, nil)
		a, b := g.nodes[0], g.nodes[1]
		const conns, n = 8, 100
		var evil []net.Conn
		for range conns {
			mine, theirs := net.Pipe()
			defer mine.Close()
			if err := a.net.Accept(theirs, b.id); err != nil {
				t.Fatal(err)
			}
			evil = append(evil, mine)
		}
		g.mu.Lock()
		before := g.resolves
		g.mu.Unlock()
		for i, c := range evil {
			var pkts [][]byte
			for j := range n {
				src := netip.AddrFrom4([4]byte{100, 97, byte(i), byte(j)})
				pkts = append(pkts, udp4(src, a.v4, "cycling", 100))
			}
			go c.Write(frames(pkts...))
		}
		synctest.Wait() // every packet read, no time passed
		g.mu.Lock()
		asked := g.resolves - before
		g.mu.Unlock()
		if asked > sourceLookupBurst {
			t.Errorf("%d connections of one peer, %d packets with new sources each: %d directory lookups; want at most %d (one peer's burst)", conns, n, asked, sourceLookupBurst)
		}
		if s := a.net.Stats(); s.Peer(b.id).Spoofed != conns*n {
			t.Errorf("b: %d spoofed, want %d", s.Peer(b.id).Spoofed, conns*n)
		}
	})
}
