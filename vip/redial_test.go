package vip

import (
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
)

// Issue 35: a peer whose connections all end while packets go to it
// (the hub of a routed connection killed) is dialed again until a path
// is back, what is sent meanwhile queued: an inner TCP backing off its
// retransmissions sends one now and then, and one lost to each failed
// dial left the flow stalled long after a path existed.

// cutGrid is two nodes whose connections from a to b the test can cut
// (cut closes both ends of each, as a circuit reset by a dying hub is;
// dials fail until mend).
type cutGrid struct {
	*grid
	a, b  *node
	conns []net.Conn // under g.mu
}

func newCutGrid(t *testing.T) *cutGrid {
	g := newGrid(t, 2, nil)
	c := &cutGrid{grid: g, a: g.nodes[0], b: g.nodes[1]}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refuse = map[identity.ID]bool{}
	g.hook = func(from, to identity.ID) net.Conn {
		if from != c.a.id || to != c.b.id || g.refuse[to] {
			return nil
		}
		mine, theirs := net.Pipe()
		if err := c.b.net.Accept(theirs, from); err != nil {
			return nil
		}
		c.conns = append(c.conns, mine, theirs)
		return mine
	}
	return c
}

// cut takes the path from a to b away: its connections reset, dials
// refused.
func (c *cutGrid) cut() {
	c.mu.Lock()
	c.refuse[c.b.id] = true
	conns := c.conns
	c.conns = nil
	c.mu.Unlock()
	for _, conn := range conns {
		conn.Close()
	}
}

// mend gives the path back.
func (c *cutGrid) mend() {
	c.mu.Lock()
	delete(c.refuse, c.b.id)
	c.mu.Unlock()
}

// connectThenCut sends a first packet from a to b (a dials b) and,
// once it arrived, cuts the path; both ends saw the reset when it
// returns (in a synctest bubble).
func (c *cutGrid) connectThenCut(t *testing.T) {
	t.Helper()
	first := udp4(c.a.v4, c.b.v4, "first", 100)
	c.a.send(t, first)
	expect(t, c.b, first, "the first packet")
	c.cut()
	synctest.Wait()
}

func (c *cutGrid) dialsToB() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dials[c.b.id]
}

// The path goes for 5 s, and a sends one packet at its start: a dials b
// again and again meanwhile, the packet queued, and once the path is
// back the packet arrives within redialMax and nothing is lost.
func TestLostPeerDialedAgainUntilBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCutGrid(t)
		a, b := c.a, c.b
		c.connectThenCut(t)
		retx := udp4(a.v4, b.v4, "a retransmission, the last for a while", 100)
		a.send(t, retx)
		time.Sleep(5 * time.Second)
		if d := c.dialsToB(); d < 5 {
			t.Errorf("a dialed b %d times while the path was gone, want it dialed again and again", d)
		}
		c.mend()
		back := time.Now()
		expect(t, b, retx, "the packet sent while the path was gone")
		if took := time.Since(back); took > redialMax {
			t.Errorf("the packet arrived %v after the path came back, want within %v", took, redialMax)
		}
		s := a.net.Stats()
		if pb := s.Peer(b.id); !pb.Connected || pb.Redials < 5 || pb.ConnLost != 0 || s.Drops != (Drops{}) {
			t.Errorf("a's peer b: %+v, drops %+v; want connected again after its redials, nothing lost", pb, s.Drops)
		}
		if !strings.Contains(a.log.String(), "dialing it again") {
			t.Errorf("a's log does not say it dials b again:\n%s", a.log.String())
		}
	})
}

// A peer whose connections all ended and to which nothing is sent for
// redialIdle goes down: the dials stop, what was queued is dropped and
// counted; the next packet dials it afresh.
func TestLostPeerGoesDownWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCutGrid(t)
		a, b := c.a, c.b
		c.connectThenCut(t)
		a.send(t, udp4(a.v4, b.v4, "queued, never delivered", 100))
		time.Sleep(redialIdle + redialMax)
		synctest.Wait()
		dials := c.dialsToB()
		time.Sleep(10 * redialMax)
		if d := c.dialsToB(); d != dials {
			t.Errorf("a dialed b %d more times after redialIdle without packets", d-dials)
		}
		s := a.net.Stats()
		if pb := s.Peer(b.id); pb.Connected || pb.Queued != 0 || pb.ConnLost != 1 || s.Drops.ConnLost != 1 {
			t.Errorf("a's peer b after redialIdle: %+v, drops %+v; want down, its queued packet dropped and counted", pb, s.Drops)
		}
		c.mend()
		again := udp4(a.v4, b.v4, "again", 100)
		a.send(t, again)
		expect(t, b, again, "a packet after the peer went down")
	})
}

// Each attempt to dial b takes 5 s to fail while the path is gone (the
// method race waits for a connect's timeout): the attempts overlap, the
// oldest giving way, so that once the path is back one gets through
// within redialMax, not when the attempts under way end.
func TestRedialOverlapsSlowAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCutGrid(t)
		a, b := c.a, c.b
		c.mu.Lock()
		c.refuseAfter = 5 * time.Second
		c.mu.Unlock()
		c.connectThenCut(t)
		retx := udp4(a.v4, b.v4, "a retransmission", 100)
		a.send(t, retx)
		time.Sleep(3 * time.Second)
		c.mend()
		back := time.Now()
		expect(t, b, retx, "the packet sent while the path was gone")
		if took := time.Since(back); took > redialMax {
			t.Errorf("the packet arrived %v after the path came back, want within %v", took, redialMax)
		}
	})
}

// a's connection to b dies unseen after a TCP segment and a UDP
// datagram went into it (a circuit whose far hub died: the writes take,
// nothing arrives), then it is reset and a dials b again: the TCP
// segment is written again on the new connection and arrives, without
// waiting for the inner TCP's next retransmission; the datagram is not
// (no duplicate datagrams).
func TestReplayOnNextConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCutGrid(t)
		a, b := c.a, c.b
		dead := blackhole()
		c.mu.Lock()
		hook := c.hook
		c.hook = func(from, to identity.ID) net.Conn {
			c.hook = hook // once
			return dead
		}
		c.mu.Unlock()
		seg := ipv4(a.v4, b.v4, 6, []byte("a TCP segment, lost with the connection"))
		a.send(t, seg, udp4(a.v4, b.v4, "a datagram, lost with the connection", 100))
		testwait.Until(t, "both packets written into the dead connection", 0, func() bool {
			return a.net.Stats().Peer(b.id).SentPackets == 2
		})
		dead.Close() // the reset
		expect(t, b, seg, "the TCP segment, written again on the next connection")
		synctest.Wait()
		if len(b.in) != 0 {
			t.Errorf("b got %d more packets: the datagram was written again", len(b.in))
		}
		if pb := a.net.Stats().Peer(b.id); pb.Replayed != 1 || !pb.Connected {
			t.Errorf("a's peer b: %+v, want 1 segment replayed", pb)
		}
	})
}
