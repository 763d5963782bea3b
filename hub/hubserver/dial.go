package hubserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/nat"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/wire"
)

const (
	// dialTimeout bounds one attempt: transport, handshake and hello.
	dialTimeout = 10 * time.Second
	// learnedDialTimeout bounds one attempt at one address of a hub
	// learned through gossip (many of them are private or firewalled).
	learnedDialTimeout = 3 * time.Second
	backoffMin         = 250 * time.Millisecond
	backoffMax         = 5 * time.Second
)

// dialHub links to the hub at spec: transport, handshake (checking the peer
// is want unless want is zero) and the hello exchange.
func (h *Hub) dialHub(ctx context.Context, spec string, want identity.ID, timeout time.Duration) (*peer, *wire.Reader, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := h.cfg.Dial(ctx, spec)
	if err != nil {
		return nil, nil, err
	}
	h.tuneTrunk(c)
	p, r, err := h.linkOver(ctx, c, want, direct.Nagle(c))
	if err != nil {
		return nil, nil, err
	}
	p.spec = spec // where its further connections are dialled (lanes.go)
	return p, r, nil
}

// linkOver runs the dialling side of a hub link over c, made by a
// transport or a splice: handshake (checking the peer is want unless want
// is zero) and the hello exchange. c is closed on error; an error after
// the handshake is an *identifiedError naming the peer.
func (h *Hub) linkOver(ctx context.Context, c net.Conn, want identity.ID, nagle bool) (*peer, *wire.Reader, error) {
	sec, err := hub.Secure(ctx, h.cfg.Creds, c, true, want, ca.Hub)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	p, r, err := h.helloOver(ctx, c, sec, nagle)
	if err != nil {
		c.Close()
		return nil, nil, &identifiedError{sec.Peer, err}
	}
	return p, r, nil
}

// helloOver runs the hello exchange of a dialled hub link after its
// handshake sec.
func (h *Hub) helloOver(ctx context.Context, c net.Conn, sec *hub.Secured, nagle bool) (*peer, *wire.Reader, error) {
	id, sealer := sec.Peer, sec.Sealer
	if id == h.id {
		return nil, nil, errors.New("that is this hub itself")
	}
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	mine := &wire.Hello{Role: "hub", Machine: h.machine(), Version: h.helloVersion(), Observed: hub.AddrPort(c.RemoteAddr()), Tunnel: nagle}
	if err := hub.WriteHello(c, sealer, mine); err != nil {
		return nil, nil, sec.Explain(err)
	}
	if err := sec.Verdict(); err != nil {
		return nil, nil, err
	}
	hello, err := sec.ReadHello()
	if err != nil {
		return nil, nil, err
	}
	if hello.Role != "hub" {
		return nil, nil, fmt.Errorf("%s is a %s, not a hub", id.Short(), hello.Role)
	}
	if err := identity.CheckName(hello.Machine.Name); err != nil {
		return nil, nil, fmt.Errorf("hub %s: %w", id.Short(), err)
	}
	_ = c.SetDeadline(time.Time{})
	p := h.newPeer(c, sealer, hello, true, nagle)
	p.who = sec.TLS.Peer
	if p.laneSecret, err = sec.LaneSecret(); err != nil {
		return nil, nil, err
	}
	return p, sec.Reader, nil
}

// identifiedError is a failure of a dialled hub link after the handshake
// proved the peer: the dialler knows whom it reached (say, a hub that
// dropped the link as a duplicate of one it has with this hub).
type identifiedError struct {
	peer identity.ID
	err  error
}

func (e *identifiedError) Error() string { return e.err.Error() }
func (e *identifiedError) Unwrap() error { return e.err }

// sleepCtx sleeps for d or until ctx is done; false if ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (h *Hub) linkedTo(id identity.ID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hubs[id] != nil
}

// dialPeer keeps a link to a configured peer: dials it whenever there is
// none, with backoff while it cannot be reached.
func (h *Hub) dialPeer(ctx context.Context, spec string) {
	var known identity.ID
	retry := backoff.ExponentialBackOff{InitialInterval: backoffMin, Multiplier: 2, MaxInterval: backoffMax}
	lastErr := ""
	for ctx.Err() == nil {
		if !known.IsZero() && h.linkedTo(known) {
			sleepCtx(ctx, backoffMax) // it dialled us; look again later
			continue
		}
		p, r, err := h.dialHub(ctx, spec, identity.ID{}, dialTimeout)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var ie *identifiedError
			if errors.As(err, &ie) {
				known = ie.peer
				if h.linkedTo(known) {
					// it dropped this link as a duplicate of ours: quiet
					// until that one ends
					retry.Reset()
					lastErr = ""
					continue
				}
			}
			if errors.Is(err, hub.ErrPermanent) {
				h.logf("hub %s: peer %s: %v; not dialling it again: retrying cannot change that", h.cfg.Name, spec, err)
				return
			}
			if class := direct.ErrorClass(err); class != lastErr {
				h.logf("hub %s: peer %s: %v (retrying every %v at most)", h.cfg.Name, spec, err, backoffMax)
				lastErr = class
			}
			sleepCtx(ctx, retry.NextBackOff())
			continue
		}
		known, lastErr = p.id, ""
		retry.Reset()
		if err := h.register(p); err != nil {
			h.logf("hub %s: peer %s: %v", h.cfg.Name, spec, err)
			p.t.Close(err)
			sleepCtx(ctx, backoffMax)
			continue
		}
		h.run(p, r) // until the link ends
		sleepCtx(ctx, backoffMin)
	}
}

// dialNearestLocked starts dialling the hubs learned through gossip that
// have no trunk and no dialler yet, the nearest first (by route cost:
// latency through the overlay plus a charge per hop), while the trunks,
// counting those being dialled, are fewer than Config.MaxLinks: with
// trunks bounded, a near hub is linked before a far one, whatever order
// the tables named them in (before, the first heard of were dialled).
func (h *Hub) dialNearestLocked() {
	full := func() bool { return h.maxLinks > 0 && len(h.hubs)+len(h.dialing) >= h.maxLinks }
	if h.ctx == nil || h.ctx.Err() != nil || full() {
		return
	}
	var cand []*route
	for _, r := range h.routes {
		if r.next != nil && h.hubs[r.hub] == nil && !h.dialing[r.hub] && len(r.addrs) > 0 {
			cand = append(cand, r)
		}
	}
	slices.SortFunc(cand, func(a, b *route) int { return cmp.Compare(a.cost(), b.cost()) })
	for _, r := range cand {
		if full() {
			return
		}
		h.startDialLocked(r)
	}
}

// startDialLocked dials learned hub r in a goroutine of its own
// (dialLearned), marked as being dialled meanwhile.
func (h *Hub) startDialLocked(r *route) {
	h.dialing[r.hub] = true
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.dialLearned(h.ctx, r.hub)
		h.mu.Lock()
		delete(h.dialing, r.hub)
		h.mu.Unlock()
	}()
}

// dialLearned tries a learned hub's addresses until a link exists (ours or
// theirs) or the hub is forgotten or unreachable.
func (h *Hub) dialLearned(ctx context.Context, id identity.ID) {
	retry := backoff.ExponentialBackOff{InitialInterval: backoffMin, Multiplier: 2, MaxInterval: backoffMax}
	lastSplice := "" // the key of the last splice failure logged (spliceFailureKey)
	for ctx.Err() == nil {
		h.mu.Lock()
		r := h.routes[id]
		var specs []string
		if r != nil && r.next != nil && h.hubs[id] == nil {
			for _, a := range r.addrs {
				specs = append(specs, a.String())
			}
		}
		h.mu.Unlock()
		if len(specs) == 0 {
			return // the tick starts a new dialler when needed
		}
		linked := false
		for _, spec := range specs {
			p, rd, err := h.dialHub(ctx, spec, id, learnedDialTimeout)
			if err != nil {
				continue
			}
			linked = true
			if err := h.register(p); err != nil {
				p.t.Close(err)
				break
			}
			h.run(p, rd)
			retry.Reset()
			break
		}
		if !linked && h.shouldSplice(id) {
			// neither end can reach the other: both behind NATs or
			// firewalls. Splice a link (the hub with the smaller ID
			// asks; the other answers).
			if p, rd, err := h.spliceHub(ctx, id); err != nil {
				if key := spliceFailureKey(err); key != lastSplice {
					h.logf("hub %s: splice a link to %s: %v (retrying after 5 s, doubling up to %v; logged again if the reason changes)",
						h.cfg.Name, h.hubName(id), err, spliceRetryMax)
					lastSplice = key
				}
			} else if err := h.register(p); err != nil {
				p.t.Close(err)
			} else {
				h.logf("hub %s: spliced a link to %s", h.cfg.Name, p.name)
				h.run(p, rd)
				retry.Reset()
			}
		}
		if !sleepCtx(ctx, retry.NextBackOff()) {
			return
		}
	}
}

// spliceFailureKey is what a hub compares splice failures by, so that a
// retry that failed the same way is not logged again: the class of a
// failed punch, the other hub's reason for declining, else the failure's
// class (direct.ErrorClass); never its words (a punch's name ports that
// change at every try).
func spliceFailureKey(err error) string {
	var refused *nat.RefusedError
	var declined *spliceDeclined
	var ne net.Error
	switch {
	case errors.As(err, &declined):
		return "declined: " + declined.reason
	case errors.Is(err, errNoSpliceAnswer):
		return "no answer to the offer"
	case !errors.Is(err, nat.ErrPunch):
		return direct.ErrorClass(err)
	case errors.As(err, &refused):
		return "punch refused by the network"
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return "punch timed out"
	}
	return "punch failed"
}
