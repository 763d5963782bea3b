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
	n.mu.Lock()
	type cut struct {
		c   *Conn
		why error
	}
	var closing []cut
	for c := range n.conns {
		if err := t.Recheck(c.peer); err != nil {
			n.cfg.Logf("vconn: closing %s connection %s: %s is no longer admitted: %v", c.method, c, c.peer, err)
			closing = append(closing, cut{c, err})
		}
	}
	for id, ss := range n.spares {
		kept := ss[:0]
		for _, s := range ss {
			if t.Recheck(s.conn.Conn.Peer) != nil {
				s.timer.Stop()
				s.conn.Close()
				n.nspares--
				continue
			}
			kept = append(kept, s)
		}
		n.spares[id] = kept
	}
	for c := range n.held {
		if t.Recheck(c.Conn.Peer) != nil {
			c.Close()
		}
	}
	n.mu.Unlock()
	for _, x := range closing {
		x.c.cutFor(x.why) // its reads and writes now say why (CutError)
	}
}
