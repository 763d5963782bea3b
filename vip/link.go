package vip

import (
	"bytes"
	"net"
	"sync/atomic"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/vconn"
)

// connGrace is how long a connection that is no longer a peer's best (a
// better one came up, or the far end dialed too) stays open, its reader
// delivering what the far end still sends on it, before it is closed.
const connGrace = 2 * time.Second

// link is one connection to a peer. Every link is read; the best one is
// sent on (the peer's conn). Links rank by how they were set up (the
// connection's Method, when it has one: direct > reverse > splice >
// routed; a connection without one, like a test's pipe, counts as
// direct); among equal ones, the one dialed by the lower identity wins,
// so that both ends, which see the same links, pick the same one.
type link struct {
	conn   net.Conn
	method vconn.Method
	rank   int
	dialer identity.ID // who dialed it: this node or the peer
	proof  principal   // who the far end proved to be (rules.go)
	// carrier: one of the peer's carriers (carrier.go), sent on by its
	// own writer beside the best link, never retired (guarded by n.mu).
	carrier bool
	// lastRecv is when a frame last came in on it (unix nanoseconds),
	// set by its reader.
	lastRecv atomic.Int64
	// while not the best (guarded by n.mu): retire closes conn after
	// connGrace; retiredAt is when it was armed, extended how often.
	retire    *time.Timer
	retiredAt int64
	extended  int
}

// methodOf is how conn was set up: its Method, or direct.
func methodOf(conn net.Conn) vconn.Method {
	if m, ok := conn.(interface{ Method() vconn.Method }); ok {
		return m.Method()
	}
	return vconn.Direct
}

// rankOf orders the methods: higher is more direct. A method this
// package does not know ranks as routed.
func rankOf(m vconn.Method) int {
	switch m {
	case vconn.Direct:
		return 3
	case vconn.Reverse:
		return 2
	case vconn.Splice:
		return 1
	}
	return 0
}

const rankRouted = 0

// better reports whether a is to be sent on rather than b.
func better(a, b *link) bool {
	if a.rank != b.rank {
		return a.rank > b.rank
	}
	return bytes.Compare(a.dialer[:], b.dialer[:]) < 0
}

func (l *link) stopRetire() {
	if l.retire != nil {
		l.retire.Stop()
		l.retire = nil
	}
	l.extended = 0
}

// addLinkLocked makes conn, dialed by dialer, a link of p: read from
// now on, and sent on when it is better than the one p sends on (which
// then retires after connGrace), else retired itself.
func (n *Network) addLinkLocked(p *peer, conn net.Conn, dialer identity.ID) {
	m := methodOf(conn)
	l := &link{conn: conn, method: m, rank: rankOf(m), dialer: dialer, proof: proofOf(conn)}
	p.links[conn] = l
	p.wasUp = true
	n.conns[conn] = struct{}{}
	n.wg.Add(1)
	go n.receive(p, l)
	cur := p.links[p.conn]
	switch {
	case cur == nil:
		n.switchLocked(p, l)
	case better(l, cur):
		n.switchLocked(p, l)
		n.retireLocked(p, cur)
	default:
		n.retireLocked(p, l)
	}
}

// switchLocked makes l the link p sends on; the writer takes it up
// after the batch it is writing.
func (n *Network) switchLocked(p *peer, l *link) {
	l.stopRetire()
	if p.conn != nil {
		from := p.links[p.conn]
		p.c.switches.Add(1)
		if n.ctx.Err() == nil {
			args := []any{"peer", p.id.Short(), "to", string(l.method), "dialed_by", l.dialer.Short()}
			if from != nil {
				args = append(args, "from", string(from.method))
			}
			n.log.Info("vip: peer path switched", args...)
		}
	}
	p.conn, p.since = l.conn, time.Now()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	if l.rank == rankRouted {
		n.startShortcutsLocked(p)
	}
}

// maxExtensions is how many times a retiring link the peer still sends
// on, as on the best one, gets another connGrace.
const maxExtensions = 3

// retireLocked closes l after connGrace unless it is p's best again by
// then; its reader delivers meanwhile. Both ends pick the same best link,
// so the peer moves its sending off l within the grace (what it sends on
// l meanwhile extends the grace, at most maxExtensions times). When,
// instead, the peer kept sending on l past half the grace and never on
// the best one, the peer has not got the best one (it restarted, or its
// end died unseen): l becomes the best, and the stale one is closed.
func (n *Network) retireLocked(p *peer, l *link) {
	if l.retire != nil {
		return
	}
	l.retiredAt = time.Now().UnixNano()
	l.retire = time.AfterFunc(connGrace, func() { n.retireDue(p, l) })
}

func (n *Network) retireDue(p *peer, l *link) {
	n.mu.Lock()
	if p.links[l.conn] != l || p.conn == l.conn || l.retire == nil {
		n.mu.Unlock() // its own again, or gone
		return
	}
	best := p.links[p.conn]
	last := l.lastRecv.Load()
	usedL := last > l.retiredAt
	// late: the peer still sent on l well after it was retired, not
	// just what was in flight as both ends switched.
	late := last > l.retiredAt+int64(connGrace/2)
	usedBest := best != nil && best.lastRecv.Load() > l.retiredAt
	for _, o := range p.links {
		if o.carrier && o.lastRecv.Load() > l.retiredAt {
			usedBest = true // the peer sends on the best link's carriers
		}
	}
	switch {
	case late && !usedBest && best != nil:
		n.switchLocked(p, l)
		n.mu.Unlock()
		if n.ctx.Err() == nil {
			n.log.Info("vip: a peer does not send on the connection chosen for it: taken for stale and closed",
				"peer", p.id.Short(), "stale", string(best.method), "now", string(l.method))
		}
		best.conn.Close()
		return
	case usedL && l.extended < maxExtensions:
		l.extended++
		l.retiredAt = time.Now().UnixNano()
		l.retire.Reset(connGrace)
		n.mu.Unlock()
		return
	}
	n.mu.Unlock()
	l.conn.Close() // its reader ends and removes it
}

// linkEnded removes the connection conn from p's links (its reader
// ended, or a write failed). When p sent on it, the best link left
// takes over, with the packets still queued; with none left, p is
// dialed again, its queue kept (peer.go: dial), or, without packets for
// redialIdle, goes down.
func (n *Network) linkEnded(p *peer, conn net.Conn, why error) {
	n.mu.Lock()
	l := p.links[conn]
	if l == nil {
		n.mu.Unlock()
		conn.Close()
		return
	}
	delete(p.links, conn)
	delete(n.conns, conn)
	l.stopRetire()
	if l.carrier {
		n.removeCarrierLocked(p, conn) // its flows hash onto the others
	}
	if p.down || p.conn != conn {
		n.mu.Unlock()
		conn.Close()
		return
	}
	p.replayLocked() // what went on conn lately goes again on the next
	var best *link
	for _, o := range p.links {
		if best == nil || better(o, best) {
			best = o
		}
	}
	if best != nil {
		if best.carrier { // the main connection from now on
			best.carrier = false
			n.removeCarrierLocked(p, best.conn)
		}
		n.switchLocked(p, best)
		n.mu.Unlock()
		conn.Close()
		return
	}
	if !n.closed && time.Since(p.lastSent) < redialIdle {
		p.conn = nil // the writer waits for the next one
		select {
		case p.wake <- struct{}{}:
		default:
		}
		n.dialLocked(p)
		n.mu.Unlock()
		conn.Close()
		if n.ctx.Err() == nil && n.quiet.Allow("peer redial") {
			n.log.Info("vip: a peer's connections all ended: dialing it again, its packets queued meanwhile", "peer", p.id.Short(), "err", why)
		}
		return
	}
	n.mu.Unlock()
	conn.Close()
	n.peerDown(p, 0, why)
}
