package hubserver

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/nat"
	"github.com/gridlink/gridlink/wire"
)

// Spliced hub links: two hubs that cannot reach each other (both behind
// NATs or stateful firewalls) but hear of each other through the overlay
// splice a TCP connection, as nodes do (see package vconn), with routed
// hub messages for the rendezvous, and run an ordinary hub link over it.
// The hub with the smaller ID offers; the other answers. A refusal or a
// failed punch, or no answer, delays the next offer to that hub, from 5 s
// doubling up to 5 min; the failure is logged when its reason changes. Each learns its own NAT from public hubs' observations
// (nat.Probe), neighbours first.
const (
	spliceReplyWait = nat.RendezvousWait
	// after a failed splice to a hub, the next waits spliceRetryMin,
	// doubling with each failure up to spliceRetryMax (h.spliceFailed).
	spliceRetryMin = 5 * time.Second
	spliceRetryMax = 5 * time.Minute
	natTrusted     = 5 * time.Minute
	// spliceGuesses: a hub behind a sequential NAT makes connections of its
	// own all the time (links, dials to learned hubs), which move the
	// counter on: it guesses wider than a node does (as many as a splice
	// message carries).
	spliceGuesses = 8
)

// spliceBackoff is the splice bookkeeping nodes keep too (nat.Backoff).
type spliceBackoff = nat.Backoff[identity.ID]

func newSpliceBackoff() *spliceBackoff {
	return &spliceBackoff{Min: spliceRetryMin, Max: spliceRetryMax}
}

type hubSplice struct {
	peer  identity.ID
	reply chan *wire.Splice
	fail  chan string
	goes  chan int
}

type hubNAT struct {
	class     nat.Class
	observers []netip.AddrPort
	at        time.Time
	err       error
}

// shouldSplice reports whether this hub should offer a splice to hub id
// now: it has the smaller ID, splicing is on, its NAT is not known to be
// unpredictable and no splice to id failed lately.
func (h *Hub) shouldSplice(id identity.ID) bool {
	if h.cfg.NoSplice || id.String() < h.id.String() {
		return false
	}
	if _, waiting := h.spliceFailed.Waiting(id, time.Now()); waiting {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.nat
	return st.at.IsZero() || st.err != nil || st.class.Predictable()
}

// natClass returns this hub's NAT, probing it if unknown or old.
func (h *Hub) natClass(ctx context.Context) (hubNAT, error) {
	h.mu.Lock()
	st := h.nat
	h.mu.Unlock()
	if !st.at.IsZero() && st.err == nil && time.Since(st.at) < natTrusted {
		return st, nil
	}
	// neighbours first: hubs this one reached, so they can be reached
	// (a far hub's public address may sit behind a firewall).
	var near, far [][]netip.AddrPort
	for _, r := range h.Routes() {
		switch {
		case !r.Reachable() || r.Hub == h.id:
		case r.Hops == 1:
			near = append(near, r.Addrs)
		default:
			far = append(far, r.Addrs)
		}
	}
	byHub := append(near, far...)
	st = hubNAT{observers: nat.Observers(byHub, 3), at: time.Now()}
	st.class, st.err = nat.Probe(ctx, st.observers, 4)
	h.mu.Lock()
	h.nat = st
	h.mu.Unlock()
	if st.err == nil {
		h.logf("hub %s: NAT %s (observed from %v)", h.cfg.Name, st.class, st.observers)
	}
	return st, st.err
}

func (h *Hub) predict(ctx context.Context, port uint16) ([]netip.AddrPort, bool, error) {
	st, err := h.natClass(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("this hub's NAT is not known: %w", err)
	}
	return nat.Endpoints(ctx, st.class, st.observers[0], port, spliceGuesses)
}

func (h *Hub) sendTo(hub identity.ID, m *wire.Message) {
	h.route(&wire.Routed{FromHub: h.id, ToHub: hub, TTL: routedTTL, Msg: m})
}

// spliceHub offers hub id a splice and, if it connects, runs the dialling
// side of a hub link over it.
func (h *Hub) spliceHub(ctx context.Context, id identity.ID) (*peer, *wire.Reader, error) {
	p, rd, err := h.spliceOnce(ctx, id)
	if err != nil && ctx.Err() == nil {
		// the other hub refused, the network did, or no answer came (no
		// route to it, say): not again soon, and later still each time
		h.spliceFailed.Failed(id, time.Now())
	}
	if err == nil {
		h.spliceFailed.Succeeded(id)
	}
	return p, rd, err
}

// spliceAnswered wraps failures after the other hub answered.
type spliceAnswered struct{ err error }

func (e *spliceAnswered) Error() string { return e.err.Error() }
func (e *spliceAnswered) Unwrap() error { return e.err }

// spliceDeclined is the other hub's answer that it cannot splice, with
// its reason (words from the wire, which it picks from a few of its own).
type spliceDeclined struct{ hub, reason string }

func (e *spliceDeclined) Error() string { return e.hub + " cannot splice: " + e.reason }

// errNoSpliceAnswer: the other hub did not answer a splice offer in time.
var errNoSpliceAnswer = errors.New("did not answer the splice offer")

func (h *Hub) spliceOnce(ctx context.Context, id identity.ID) (*peer, *wire.Reader, error) {
	var tb [8]byte
	_, _ = rand.Read(tb[:])
	token := binary.BigEndian.Uint64(tb[:])
	s := &hubSplice{peer: id, reply: make(chan *wire.Splice, 1), fail: make(chan string, 1)}
	h.mu.Lock()
	h.splices[token] = s
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.splices, token)
		h.mu.Unlock()
	}()
	me := h.machine()
	offer := func(eps []netip.AddrPort) error {
		h.sendTo(id, &wire.Message{Kind: wire.KSplice, Splice: &wire.Splice{Token: token, From: &me, Port: 1, Target: id, Addrs: eps}})
		return nil
	}
	await := func(ctx context.Context) ([]netip.AddrPort, time.Duration, error) {
		select {
		case r := <-s.reply:
			return r.Addrs, time.Duration(r.HeldUs) * time.Microsecond, nil
		case reason := <-s.fail:
			return nil, 0, &spliceAnswered{&spliceDeclined{hub: h.hubName(id), reason: reason}}
		case <-time.After(spliceReplyWait):
			return nil, 0, fmt.Errorf("%s %w within %v", h.hubName(id), errNoSpliceAnswer, spliceReplyWait)
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
	sendGo := func() error {
		h.sendTo(id, &wire.Message{Kind: wire.KSpliceGo, Splice: &wire.Splice{Token: token, Target: id}})
		return nil
	}
	c, err := nat.Offer(ctx, h.predict, offer, await, sendGo)
	if errors.Is(err, nat.ErrPunch) {
		err = &spliceAnswered{err}
	}
	if err != nil {
		return nil, nil, err
	}
	lctx, lcancel := context.WithTimeout(ctx, dialTimeout)
	defer lcancel()
	return h.linkOver(lctx, c, id, false)
}

// spliceMessage handles a hub's splice rendezvous messages.
func (h *Hub) spliceMessage(r *wire.Routed) {
	m := r.Msg
	if m.Kind == wire.KSplice {
		go h.answerSplice(r)
		return
	}
	var token uint64
	if m.Splice != nil {
		token = m.Splice.Token
	} else if m.Fail != nil {
		token = m.Fail.Token
	}
	h.mu.Lock()
	s := h.splices[token]
	h.mu.Unlock()
	if s == nil || s.peer != r.FromHub {
		return
	}
	switch {
	case m.Kind == wire.KSpliceReply && s.reply != nil:
		select {
		case s.reply <- m.Splice:
		default:
		}
	case m.Kind == wire.KSpliceGo && s.goes != nil:
		select {
		case s.goes <- m.Splice.Attempt:
		default:
		}
	case m.Kind == wire.KSpliceFail && s.fail != nil:
		select {
		case s.fail <- m.Fail.Reason:
		default:
		}
	}
}

// answerSplice is the answering hub's side: reserve, predict, answer,
// connect on the go, then serve the link as an accepted one.
func (h *Hub) answerSplice(r *wire.Routed) {
	got := time.Now()
	o := r.Msg.Splice
	fail := func(reason string) {
		h.sendTo(r.FromHub, &wire.Message{Kind: wire.KSpliceFail, Fail: &wire.Fail{Token: o.Token, Reason: reason}})
	}
	switch {
	case !r.FromNode.IsZero() || o.Target != h.id || o.From.ID != r.FromHub:
		fail("a hub splice offer must come from the hub it names, to this hub")
		return
	case h.cfg.NoSplice:
		fail("splicing is off on hub " + h.cfg.Name)
		return
	case h.linkedTo(r.FromHub):
		fail("already linked")
		return
	}
	s := &hubSplice{peer: r.FromHub, goes: make(chan int, 1)}
	h.mu.Lock()
	if h.splices[o.Token] != nil {
		h.mu.Unlock()
		fail("splice token in use")
		return
	}
	h.splices[o.Token] = s
	ctx := h.ctx
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.splices, o.Token)
		h.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(ctx, 2*spliceReplyWait)
	defer cancel()
	reply := func(eps []netip.AddrPort, held time.Duration) error {
		h.sendTo(r.FromHub, &wire.Message{Kind: wire.KSpliceReply, Splice: &wire.Splice{Token: o.Token, Target: h.id, Addrs: eps, HeldUs: held.Microseconds()}})
		return nil
	}
	awaitGo := func(ctx context.Context) error {
		select {
		case <-s.goes:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c, err := nat.Answer(ctx, got, o.Addrs, h.predict, reply, awaitGo)
	if errors.Is(err, nat.ErrPredict) {
		fail(err.Error())
		return
	}
	if err != nil {
		h.logf("hub %s: splice from %s: %v", h.cfg.Name, h.hubName(r.FromHub), err)
		return
	}
	h.wg.Add(1)
	go func() { defer h.wg.Done(); h.serveConn(h.ctx, c, nil) }()
}
