package vconn

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/wire"
)

// reverseMethod: asked through the hubs, the target dials this node's
// direct listener back (the target's side: callBack, below).
type reverseMethod struct{}

func (reverseMethod) rank() int      { return 1 }
func (reverseMethod) needsHub() bool { return true }

// headStarts: reverse starts one head start after direct.
func (reverseMethod) headStarts() int { return 1 }

// setupTrips: request (half a round trip), the target's connect (one),
// the handshake, which this end finishes as the server half a round trip
// after the target (one and a half): three round trips (measured on
// grid6 at the paper's round trips: 3.07).
func (reverseMethod) setupTrips() int { return 6 }

func (reverseMethod) possible(n *Node, _ identity.Machine) error {
	if len(n.localMachine().Addrs) == 0 {
		return methodErr(Reverse, Local, ErrNoAddress, fmt.Errorf("this node has no address to be called back at"))
	}
	return nil
}

// plausible: the target must reach us: we have a public address, or it has
// one on one of our networks; a target without a default route reaches
// only its own networks.
func (reverseMethod) plausible(n *Node, target identity.Machine, r reach) bool {
	if target.NonRouted {
		return r.near(target.Addrs)
	}
	for _, a := range n.localMachine().Addrs {
		if ip := a.Addr().Unmap(); (!ip.IsPrivate() && ip.IsGlobalUnicast()) || ip.IsLoopback() {
			return true
		}
	}
	return r.reachable(onlyPrivate(target.Addrs))
}

// attempt: through a reverse spare kept for the target if there is one
// (spare.go), else asking it to call back.
func (reverseMethod) attempt(ctx context.Context, n *Node, target identity.Machine, port uint16, _ int) (net.Conn, bool, error) {
	return n.spareSetup(ctx, target, port, Reverse, func(ctx context.Context) (net.Conn, error) {
		return n.reverse(ctx, target, port)
	})
}

// cause: the target's connection back to this host did not arrive (a
// refusal or a hub's failure would have, as a reverse-fail): it got no
// answer here.
func (reverseMethod) cause(_ *Node, err error) (End, error, bool) {
	if errors.Is(err, context.DeadlineExceeded) {
		return Local, ErrTimeout, true
	}
	return EndUnknown, nil, false
}

// explain: the target could not connect to this host.
func (reverseMethod) explain(me *MethodError, f Facts, s string) (string, bool) {
	why, noted := explainConnectNoted(me.Cause, me.End, "the target", "this host", f.Local, nil, s)
	if me.End == Local && !f.LocalRouted && !noted {
		why += "; this host has no default route: it is on a non-routed network"
	}
	return why, true
}

type pendingReverse struct {
	target  identity.ID
	conn    chan *direct.Conn
	fail    chan *wire.Fail
	reached func() // the race's: the call back is in its handshake (lastStep)
}

// reverse asks target through the hubs to connect back to this node's
// direct listener, and waits for the connection or its failure.
func (n *Node) reverse(ctx context.Context, target identity.Machine, port uint16) (net.Conn, error) {
	var tb [8]byte
	_, _ = rand.Read(tb[:])
	token := binary.BigEndian.Uint64(tb[:])
	p := &pendingReverse{target: target.ID, conn: make(chan *direct.Conn, 1), fail: make(chan *wire.Fail, 1), reached: lastStepFunc(ctx)}
	n.rdv.mu.Lock()
	n.rdv.reverses[token] = p
	n.rdv.mu.Unlock()
	defer func() {
		n.rdv.mu.Lock()
		delete(n.rdv.reverses, token)
		n.rdv.mu.Unlock()
	}()
	req := &wire.Message{Kind: wire.KReverse, Reverse: &wire.Reverse{Token: token, From: n.Machine(), Port: port, Target: target.ID}}
	if err := n.session.Send(ctx, target.Hub, target.ID, req); err != nil {
		return nil, fmt.Errorf("ask %s to call back: %w", target, err)
	}
	select {
	case c := <-p.conn:
		return c, nil
	case f := <-p.fail:
		return nil, &failError{code: f.Code, reason: f.Reason}
	case <-ctx.Done():
		return nil, fmt.Errorf("%s did not call back: %w", target, ctx.Err())
	}
}

// callBack answers a reverse request: dial the asker's direct listener.
func (n *Node) callBack(m *wire.Routed) {
	rev := m.Msg.Reverse
	fail := func(code, reason string) { n.sendFail(m, wire.KReverseFail, rev.Token, code, reason) }
	if rev.Target != n.ID() || rev.From.ID != m.FromNode {
		fail("", "reverse request for another node or from a node it does not name")
		return
	}
	spare := rev.Port == wire.SparePort // its port is asked later (spare.go)
	if spare {
		if err := n.spareAsked(Reverse); err != nil {
			fail(wire.FailPortRefused, err.Error())
			return
		}
	} else if n.listener(rev.Port) == nil {
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
	if spare {
		n.holdOthersSpare(c, rev.From, Reverse)
		return
	}
	n.deliver(c, Reverse, rev.From, rev.Port)
}
