package vconn

import "github.com/gridlink/gridlink/pki"

// watchRevocations closes the virtual connections and spares whose peer a
// new revocation list revokes: a revoked member loses what it has open
// here at once, not only the connections it would set up next.
// Connections that left TLS (Clear) are checked by the peer their
// handshake proved, like the others.
func (n *Node) watchRevocations(t *pki.Trust) {
	defer n.wg.Done()
	t.OnChange(n.ctx.Done(), func() { n.closeRevoked(t) })
}

// closeRevoked closes what t no longer admits.
func (n *Node) closeRevoked(t *pki.Trust) {
	type cut struct {
		c   *Conn
		why error
	}
	var closing []cut
	n.conns.mu.Lock()
	for c := range n.conns.set {
		if err := t.Recheck(c.peer); err != nil {
			n.cfg.Logf("vconn: closing %s connection %s: %s is no longer admitted: %v", c.method, c, c.peer, err)
			closing = append(closing, cut{c, err})
		}
	}
	n.conns.mu.Unlock()
	n.spares.mu.Lock()
	for id, ss := range n.spares.byTarget {
		kept := ss[:0]
		for _, s := range ss {
			if t.Recheck(s.conn.Conn.Peer) != nil {
				s.timer.Stop()
				s.conn.Close()
				n.spares.count--
				continue
			}
			kept = append(kept, s)
		}
		n.spares.byTarget[id] = kept
	}
	for c := range n.spares.held {
		if t.Recheck(c.Conn.Peer) != nil {
			c.Close()
		}
	}
	n.spares.mu.Unlock()
	for _, x := range closing {
		x.c.cutFor(x.why) // its reads and writes now say why (CutError)
	}
}

// Recheck says why this node's trust, as it is now (its newest revocation
// list), no longer admits peer, or nil: what a service that acts on a
// connection's identity asks before it acts (a connection judged before a
// revocation is cut only once the revocation's news has gone round).
// Always nil in an open grid.
func (n *Node) Recheck(peer pki.Peer) error {
	if t := n.creds.Trust(); t != nil {
		return t.Recheck(peer)
	}
	return nil
}
