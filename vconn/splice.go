package vconn

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/nat"
	"github.com/gridlink/gridlink/wire"
)

// TCP splicing (SmartSockets §3.3.3, with DCUtR's timing): both ends
// connect to each other at the same moment, each to the endpoint the other
// predicted for itself, so that each end's NAT or stateful firewall sees an
// outgoing connection and lets the other's SYN in as its answer.
//
//	dialler                           target (through the hubs)
//	reserve a port, predict endpoint
//	splice (offer: endpoint, port) ─▶ reserve, predict, check the port
//	                               ◀─ splice-reply (endpoint)   [or splice-fail]
//	rtt := time since the offer
//	splice-go                      ─▶ connect now
//	wait rtt/2, connect
//	TLS handshake as the client, request "x<token>" ─▶ handed to Accept
//
// Early answers (nat.Reply.Early): when the two sites' hubs are linked to
// each other, the first attempt's offer carries their link's round trip
// (spliceRTT) and the target, instead of waiting for the go, connects
// about half of it after its reply (three quarters: nat.AnswerEarly says
// why), when the reply reaches the dialler, which connects on it and
// sends no go: the connection is up half a round trip sooner (three round
// trips in all, not three and a half).
//
// An attempt that does not connect within its time-out is retried with
// new ports, up to spliceAttempts times. The identity check of the
// handshake still applies: a wrong prediction can at worst reach the wrong
// machine, which the handshake refuses.
const (
	spliceAttempts = 3
	// spliceReplyWait bounds the wait for each rendezvous message.
	spliceReplyWait = nat.RendezvousWait
	// spliceFailedFor is how long a failed splice toward a site keeps the
	// method out of races to it (n.noSplice), however often it failed.
	spliceFailedFor = 10 * time.Minute
)

type pendingSplice struct {
	peer  identity.ID
	port  uint16
	reply chan *wire.Splice // dialler: the target's answers
	fail  chan *wire.Fail   // dialler: the target's (or a hub's) refusal; target: the dialler's call-off
	goes  chan int          // target: the go of each attempt
}

func newToken() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:])
}

// splice sets up a spliced connection to port on target, in up to tries
// attempts.
func (n *Node) splice(ctx context.Context, target identity.Machine, port uint16, tries int) (net.Conn, error) {
	token := newToken()
	p := &pendingSplice{peer: target.ID, port: port, reply: make(chan *wire.Splice, 4), fail: make(chan *wire.Fail, 1)}
	n.rdv.mu.Lock()
	n.rdv.splices[token] = p
	n.rdv.mu.Unlock()
	defer func() {
		n.rdv.mu.Lock()
		delete(n.rdv.splices, token)
		n.rdv.mu.Unlock()
	}()
	var errs []error
	punched := false
	for attempt := 0; attempt < max(tries, 1); attempt++ {
		// the first attempt answers early when the round trip can be
		// estimated (nat.Reply.Early), the others as measured
		est := time.Duration(0)
		if attempt == 0 {
			est = n.spliceRTT(ctx, target)
		}
		c, err := n.spliceAttempt(ctx, target, port, token, attempt, p, est)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, direct.ErrRefused) || ctx.Err() != nil || errors.Is(err, errSpliceImpossible) {
			return nil, err
		}
		// a punch timed by an estimate that missed says nothing of the network
		punched = punched || errors.Is(err, errPunch) && est == 0
		errs = append(errs, fmt.Errorf("attempt %d: %w", attempt+1, err))
		n.cfg.Logf("vconn: splice to %s, attempt %d: %v", target, attempt+1, err)
	}
	err := fmt.Errorf("splice to %s failed: %w", target, errors.Join(errs...))
	if punched && port != wire.SparePort {
		// the network itself said no (not the hubs, not a busy moment):
		// remember it for the site. (A spare's failure, set up in the
		// background, is only logged: the next setup tries again.)
		n.spliceFailed(target)
	}
	return nil, err
}

// errPunch marks attempts that got as far as connecting.
var errPunch = nat.ErrPunch

// errSpliceImpossible wraps reasons that no retry can change.
var errSpliceImpossible = errors.New("splicing cannot work")

// errNoSpliceAnswer: the target did not answer a splice offer in time.
var errNoSpliceAnswer = errors.New("no answer to the splice offer")

// spliceFailed keeps splicing out of races to target's site for a while.
func (n *Node) spliceFailed(target identity.Machine) {
	if target.Hub.IsZero() {
		return
	}
	n.noSplice.Failed(target.Hub, time.Now())
}

// spliceRTT estimates the round trip between this node and target for an
// early answer (nat.Reply.Early): the accumulated latency of the hubs'
// route to the target's hub when it is one hop, the two sites' hubs
// linked to each other, whose link's round trip is close to the ends';
// zero (none) otherwise, or when the hub cannot say at once.
func (n *Node) spliceRTT(ctx context.Context, target identity.Machine) time.Duration {
	if target.Hub.IsZero() || target.Hub == n.Machine().Hub {
		return 0 // no hub, or both on one: no hub link to read (and no question to wait for)
	}
	ctx, cancel := context.WithTimeout(ctx, spliceRTTWait)
	defer cancel()
	hubs, err := n.session.Hubs(ctx)
	if err != nil {
		return 0
	}
	for _, r := range hubs {
		if r.Hub == target.Hub && r.Reachable() && r.Hops == 1 && r.LatencyUs > 0 {
			if rtt := time.Duration(r.LatencyUs) * time.Microsecond; rtt >= n.spliceEarlyMin {
				return rtt
			}
			return 0
		}
	}
	return 0
}

// spliceRTTWait bounds the question to this node's hub behind spliceRTT.
const spliceRTTWait = 100 * time.Millisecond

// spliceEarlyMin is the shortest round trip an early answer is timed by.
// The target's SYN leaves a quarter of the estimate before the dialler's
// reaches its NAT (nat.AnswerEarly); below 20 ms that margin (5 ms) is
// within a loaded host's scheduling delays, and a NAT that rejects
// unsolicited SYNs resets the dialler's (CI: nat-reject at 0.2 ms, 2 of
// 6 early splices refused 23-26 times, routed), for a saving under 10 ms.
const spliceEarlyMin = 20 * time.Millisecond

func (n *Node) spliceAttempt(ctx context.Context, target identity.Machine, port uint16, token uint64, attempt int, p *pendingSplice, est time.Duration) (net.Conn, error) {
	start := time.Now()
	send := func(kind string, sp *wire.Splice) error {
		if err := n.session.Send(ctx, target.Hub, target.ID, &wire.Message{Kind: kind, Splice: sp}); err != nil {
			return fmt.Errorf("%s to %s: %w", kind, target, err)
		}
		return nil
	}
	me := n.Machine()
	offer := func(eps []netip.AddrPort) error {
		return send(wire.KSplice, &wire.Splice{Token: token, Attempt: attempt, From: &me, Port: port, Target: target.ID, Addrs: eps, RTTUs: est.Microseconds()})
	}
	await := func(ctx context.Context) (nat.Reply, error) {
		wait := time.NewTimer(spliceReplyWait)
		defer wait.Stop()
		for {
			select {
			case r := <-p.reply:
				if r.Attempt == attempt { // else a late answer to an earlier attempt
					return nat.Reply{Peer: r.Addrs, Held: time.Duration(r.HeldUs) * time.Microsecond, Early: r.Early && est > 0}, nil
				}
			case f := <-p.fail:
				fe := &failError{code: f.Code, reason: f.Reason}
				switch f.Code {
				case wire.FailPortRefused:
					return nat.Reply{}, fe
				case wire.FailNoHubRoute, wire.FailNotAttached: // a hub's words, naming it
					return nat.Reply{}, fmt.Errorf("%w: %w", errSpliceImpossible, fe)
				}
				return nat.Reply{}, fmt.Errorf("%w: %s says: %w", errSpliceImpossible, target, fe)
			case <-wait.C:
				return nat.Reply{}, fmt.Errorf("%s did not answer the splice offer within %v: %w", target, spliceReplyWait, errNoSpliceAnswer)
			case <-ctx.Done():
				return nat.Reply{}, ctx.Err()
			}
		}
	}
	var offered, went bool
	sendGo := func() error {
		went = true
		return send(wire.KSpliceGo, &wire.Splice{Token: token, Attempt: attempt, Target: target.ID})
	}
	raw, err := nat.OfferTimed(ctx, n.predictEndpoints, func(eps []netip.AddrPort) error {
		offered = true
		return offer(eps)
	}, await, sendGo)
	if err != nil && offered && !went && ctx.Err() != nil {
		// the race ended another way while the target may hold a port
		// for the go: tell it none comes
		go n.callOffSplice(target, token, attempt, ctx.Err())
	}
	if errors.Is(err, nat.ErrPredict) {
		return nil, fmt.Errorf("%w: %w", errSpliceImpossible, err)
	}
	if err != nil {
		return nil, err
	}
	n.cfg.Logf("vconn: splice to %s: connected after %v", target, time.Since(start))
	dc, err := n.dialer.Handshake(ctx, raw, target.ID, request{splice: true, token: token}.String())
	if err != nil {
		if errors.Is(err, direct.ErrRefused) {
			return nil, err
		}
		return nil, fmt.Errorf("handshake over the splice: %w", err)
	}
	return dc, nil
}

// answerSplice is the target's side of one attempt: reserve, predict,
// answer, and connect when the go comes.
func (n *Node) answerSplice(m *wire.Routed) {
	got := time.Now()
	s := m.Msg.Splice
	fail := func(code, reason string) { n.sendFail(m, wire.KSpliceFail, s.Token, code, reason) }
	if s.Target != n.ID() || s.From.ID != m.FromNode {
		fail("", "splice offer for another node or from a node it does not name")
		return
	}
	if s.Port == wire.SparePort { // its port is asked later (spare.go)
		if err := n.spareAsked(Splice); err != nil {
			fail(wire.FailPortRefused, err.Error())
			return
		}
	} else if n.listener(s.Port) == nil {
		fail(wire.FailPortRefused, n.refusal(s.Port))
		return
	}
	if !n.enabled(Splice) {
		fail(wire.FailDisabled, "splicing is disabled on "+n.cfg.Name)
		return
	}
	n.rdv.mu.Lock()
	p := n.rdv.splices[s.Token]
	if p == nil {
		p = &pendingSplice{peer: s.From.ID, port: s.Port, goes: make(chan int, 4), fail: make(chan *wire.Fail, 4)}
		n.rdv.splices[s.Token] = p
		// forgotten once no attempt can still be running
		time.AfterFunc(spliceAttempts*2*spliceReplyWait, func() {
			n.rdv.mu.Lock()
			if n.rdv.splices[s.Token] == p {
				delete(n.rdv.splices, s.Token)
			}
			n.rdv.mu.Unlock()
		})
	}
	n.rdv.mu.Unlock()
	if p.peer != s.From.ID || p.goes == nil {
		fail("", "splice token in use")
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, 2*spliceReplyWait)
	defer cancel()
	reply := func(eps []netip.AddrPort, held time.Duration) error {
		return n.session.Send(ctx, m.FromHub, m.FromNode, &wire.Message{Kind: wire.KSpliceReply,
			Splice: &wire.Splice{Token: s.Token, Attempt: s.Attempt, Target: n.ID(), Addrs: eps, HeldUs: held.Microseconds()}})
	}
	awaitGo := func(ctx context.Context) error {
		for {
			select {
			case a := <-p.goes:
				if a == s.Attempt { // else a late go of an earlier attempt
					return nil
				}
			case f := <-p.fail: // no go will come, for any attempt of this splice
				select {
				case p.fail <- f: // for a later attempt's wait, should one begin
				default:
				}
				return fmt.Errorf("%w: %s", errCalledOff, f.Reason)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	var raw net.Conn
	var err error
	if s.RTTUs > 0 { // an early answer: connect half the estimate after the reply
		early := func(eps []netip.AddrPort, held time.Duration) error {
			return n.session.Send(ctx, m.FromHub, m.FromNode, &wire.Message{Kind: wire.KSpliceReply,
				Splice: &wire.Splice{Token: s.Token, Attempt: s.Attempt, Target: n.ID(), Addrs: eps, HeldUs: held.Microseconds(), Early: true}})
		}
		n.cfg.Logf("vconn: splice from %s, attempt %d: answering early (round trip estimated %v)", s.From, s.Attempt+1, time.Duration(s.RTTUs)*time.Microsecond)
		raw, err = nat.AnswerEarly(ctx, got, s.Addrs, n.predictEndpoints, early, time.Duration(s.RTTUs)*time.Microsecond)
	} else {
		raw, err = nat.Answer(ctx, got, s.Addrs, n.predictEndpoints, reply, awaitGo)
	}
	if errors.Is(err, nat.ErrPredict) {
		code := wire.FailNATUnknown
		if n.natCause() == ErrRandomNAT {
			code = wire.FailNATRandom
		}
		fail(code, err.Error())
		return
	}
	if err != nil {
		n.cfg.Logf("vconn: splice from %s, attempt %d: %v", s.From, s.Attempt+1, err)
		return
	}
	n.direct.ServeConn(raw) // the handshake's request names the token: acceptDirect delivers it
}

// errCalledOff: no go will come for a splice the target answered: its
// dialler called it off (wire.FailCalledOff), or a hub could not deliver
// the answer.
var errCalledOff = errors.New("no go will come")

// callOffSplice tells target that the splice of token (last attempt
// attempt) is over, why being how the dial ended: the target stops
// waiting for the go and frees the port it holds.
func (n *Node) callOffSplice(target identity.Machine, token uint64, attempt int, why error) {
	ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
	defer cancel()
	reason := fmt.Sprintf("%s called the splice off: its dial ended before attempt %d's go (%v)", n.cfg.Name, attempt+1, why)
	_ = n.session.Send(ctx, target.Hub, target.ID, &wire.Message{Kind: wire.KSpliceFail, Fail: &wire.Fail{Token: token, Code: wire.FailCalledOff, Reason: reason}})
}

// spliceMessage routes a rendezvous message to the waiting splice.
func (n *Node) spliceMessage(m *wire.Routed) {
	token := uint64(0)
	if m.Msg.Splice != nil {
		token = m.Msg.Splice.Token
	} else if m.Msg.Fail != nil {
		token = m.Msg.Fail.Token
	}
	if m.Msg.Kind == wire.KSplice {
		go n.answerSplice(m)
		return
	}
	n.rdv.mu.Lock()
	p := n.rdv.splices[token]
	n.rdv.mu.Unlock()
	// a hub that could not forward our offer answers for the target
	// (hub.Hub.undeliverable): a failure from no node.
	fromHub := m.FromNode.IsZero() && m.Msg.Kind == wire.KSpliceFail
	if p == nil || (p.peer != m.FromNode && !fromHub) {
		return
	}
	switch m.Msg.Kind {
	case wire.KSpliceReply:
		if p.reply != nil {
			select {
			case p.reply <- m.Msg.Splice:
			default:
			}
		}
	case wire.KSpliceGo:
		if p.goes != nil {
			select {
			case p.goes <- m.Msg.Splice.Attempt:
			default:
			}
		}
	case wire.KSpliceFail:
		if p.fail != nil {
			select {
			case p.fail <- m.Msg.Fail:
			default:
			}
		}
	}
}

// takeSplice hands a spliced connection that passed its handshake to the
// listener of the port its offer named.
func (n *Node) takeSplice(c *direct.Conn, token uint64) {
	n.rdv.mu.Lock()
	p := n.rdv.splices[token]
	delete(n.rdv.splices, token)
	n.rdv.mu.Unlock()
	if p == nil || p.peer != c.Peer || p.goes == nil {
		c.Close()
		return
	}
	if p.port == wire.SparePort {
		n.holdOthersSpare(c, identity.Machine{ID: c.Peer}, Splice)
		return
	}
	n.deliver(c, Splice, identity.Machine{ID: c.Peer}, p.port)
}
