package vconn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/wire"
)

// checkDirect decides, during the direct layer's handshake, whether a
// request may proceed: a listener on the port, or a reverse token we wait
// for from that very peer.
func (n *Node) checkDirect(peer identity.ID, req string) error {
	r, err := parseRequest(req)
	if err != nil {
		return err
	}
	if r.spare {
		n.spares.mu.Lock()
		full := len(n.spares.held) >= maxHeldSpares
		n.spares.mu.Unlock()
		if full {
			return fmt.Errorf("%s holds %d spare connections already", n.cfg.Name, maxHeldSpares)
		}
		return nil
	}
	if r.splice {
		n.rdv.mu.Lock()
		p := n.rdv.splices[r.token]
		n.rdv.mu.Unlock()
		if p == nil || p.peer != peer || p.goes == nil {
			return fmt.Errorf("no splice %x waiting for %s", r.token, peer.Short())
		}
		return nil
	}
	if r.reverse {
		n.rdv.mu.Lock()
		p := n.rdv.reverses[r.token]
		n.rdv.mu.Unlock()
		if p == nil || p.target != peer {
			return fmt.Errorf("no reverse setup %x waiting for %s", r.token, peer.Short())
		}
		return nil
	}
	if n.listener(r.port) == nil {
		return fmt.Errorf("%s", n.refusal(r.port))
	}
	return nil
}

// acceptDirect takes connections from the direct listener: connections to
// virtual ports, and reverse setups calling back.
func (n *Node) acceptDirect() {
	defer n.wg.Done()
	for {
		c, err := n.direct.Accept()
		if err != nil {
			return
		}
		r, err := parseRequest(c.Request)
		if err != nil {
			c.Close()
			continue
		}
		peer := identity.Machine{ID: c.Peer}
		if r.splice {
			go n.takeSplice(c, r.token)
			continue
		}
		if r.spare {
			n.spares.mu.Lock()
			if n.ctx.Err() != nil { // closing: Close has closed the held ones
				n.spares.mu.Unlock()
				c.Close()
				continue
			}
			n.spares.held[c] = true
			n.spares.mu.Unlock()
			n.wg.Add(1)
			go n.holdSpare(c, peer)
			continue
		}
		if r.reverse {
			n.rdv.mu.Lock()
			p := n.rdv.reverses[r.token]
			n.rdv.mu.Unlock()
			if p == nil {
				c.Close()
				continue
			}
			select {
			case p.conn <- c:
			default:
				c.Close()
			}
			continue
		}
		go n.deliver(c, Direct, peer, r.port)
	}
}

// serveMessages handles routed control messages: reverse requests to this
// node and failures of our own.
func (n *Node) serveMessages() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case m, ok := <-n.session.Messages():
			if !ok {
				return
			}
			switch m.Msg.Kind {
			case wire.KReverse:
				go n.callBack(m)
			case wire.KSplice, wire.KSpliceReply, wire.KSpliceGo, wire.KSpliceFail:
				n.spliceMessage(m)
			case wire.KReverseFail:
				n.rdv.mu.Lock()
				p := n.rdv.reverses[m.Msg.Fail.Token]
				n.rdv.mu.Unlock()
				if p != nil {
					select {
					case p.fail <- m.Msg.Fail:
					default:
					}
				}
			}
		}
	}
}

// sendFail tells the sender of m that its request (token) failed, and
// why: a reverse-fail or splice-fail message, code a wire.Fail code.
func (n *Node) sendFail(m *wire.Routed, kind string, token uint64, code, reason string) {
	ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
	defer cancel()
	_ = n.session.Send(ctx, m.FromHub, m.FromNode, &wire.Message{Kind: kind, Fail: &wire.Fail{Token: token, Reason: reason, Code: code}})
}

// callBack answers a reverse request: dial the asker's direct listener.
func (n *Node) callBack(m *wire.Routed) {
	rev := m.Msg.Reverse
	fail := func(code, reason string) { n.sendFail(m, wire.KReverseFail, rev.Token, code, reason) }
	if rev.Target != n.ID() || rev.From.ID != m.FromNode {
		fail("", "reverse request for another node or from a node it does not name")
		return
	}
	if n.listener(rev.Port) == nil {
		fail(wire.FailPortRefused, n.refusal(rev.Port))
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	n.rdv.mu.Lock()
	n.rdv.callbacks[rev.Token] = rev.Port
	n.rdv.mu.Unlock()
	c, err := n.dialer.Dial(ctx, rev.From, request{reverse: true, token: rev.Token}.String())
	n.rdv.mu.Lock()
	delete(n.rdv.callbacks, rev.Token)
	n.rdv.mu.Unlock()
	if err != nil {
		if errors.Is(err, pki.ErrDenied) {
			n.cfg.Logf("vconn: reverse connection to %s for port %d: %v", rev.From, rev.Port, err)
		}
		fail(failCode(err), fmt.Sprintf("%s cannot reach %s's listener: %v", n.cfg.Name, rev.From, err))
		return
	}
	n.deliver(c, Reverse, rev.From, rev.Port)
}

// serveCircuits handles circuits opened toward this node (routed setup).
func (n *Node) serveCircuits() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case in, ok := <-n.session.Incoming():
			if !ok {
				return
			}
			if n.listener(in.Open.Port) == nil {
				in.Refuse(n.refusal(in.Open.Port))
				continue
			}
			if err := in.Accept(); err != nil {
				continue
			}
			go func() {
				ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
				defer cancel()
				tc, err := n.creds.Server(ctx, in.Circuit, func(p pki.Peer) error {
					if p.ID != in.Open.From.ID {
						return fmt.Errorf("circuit opened by %s but handshake by %s", in.Open.From.ID.Short(), p.ID.Short())
					}
					return n.access(in.Open.Port, p)
				})
				if err != nil {
					n.cfg.Logf("vconn: routed connection from %s to port %d: %v", in.Open.From, in.Open.Port, err)
					if !errors.Is(err, pki.ErrDenied) { // a refusal closes once its reason is out
						in.Circuit.Close()
					}
					return
				}
				n.deliver(tc, Routed, in.Open.From, in.Open.Port)
			}()
		}
	}
}
