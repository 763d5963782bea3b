package vconn

import (
	"context"
	"fmt"
	"time"

	"github.com/gridlink/gridlink/identity"
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
		p.reached() // the handshake is under way: a race waits for it (lastStep)
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
			n.holdOthersSpare(c, peer, Direct)
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
