package hub

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// This file is a session's return to its preferred hub (issue 23; like
// tailscale's DERP home region). The order of SessionConfig.Hubs is the
// node's preference: the first is its home. A session that lost its hub
// re-attaches to the next that answers (attach.go) and, unless
// SessionConfig.NoReturn, does not stay there: while attached to a hub
// other than the first, it probes the hubs before it (homeProbeMin,
// doubling to homeProbeMax while they fail, jittered) with a full attach
// (transport, handshake, the hub's hello: admitted, not merely
// answering), and moves to the first that admits it:
//
//  1. it attaches there first (the hub claims its name, which the hub it
//     leaves holds for the same identity: no conflict), waits until that
//     hub reaches the one it leaves (homeReach at most: until then the
//     nodes of the other hubs could not look it up there), and claims its
//     virtual addresses there;
//  2. it makes the new link its current one (requests go there from now
//     on: no moment without a hub) and logs "moved from hub B to hub A";
//  3. the old link takes no new requests of the node but stays up while
//     circuits on it carry on (moveGrace at least, moveDrain at most),
//     kept alive by pings; the node tells the old hub it moved
//     (wire.KMoved), which then answers no lookups of it, so that new
//     connections find it at the new hub rather than through a link
//     about to close; then the link closes with ErrMoved, which frees the
//     node's name and addresses at the old hub. Circuits still open then
//     are reset (a resumable link sets its connection up again, through
//     the new hub).
//
// A probe that fails (the hub is down, or answers and refuses the node)
// is logged once per change of its class (or every probeLogEvery), and
// the next waits twice as long. A node that moved home and loses its
// home again within homeStable waits twice as long as the last time
// before the next probe, so a flapping hub cannot make it move faster
// than its backoff; after homeStable at home the backoff starts over.

const (
	// homeProbeMin and homeProbeMax bound the pause before probing the
	// preferred hubs (±10% jitter).
	homeProbeMin = 2 * time.Second
	homeProbeMax = 30 * time.Second
	// homeStable is how long a node stays at a preferred hub before a
	// later fallback's probing starts over at homeProbeMin.
	homeStable = time.Minute
	// homeReach bounds the wait for a preferred hub that admitted the node
	// to reach the hub the node leaves; the move goes ahead after it.
	homeReach = 10 * time.Second
	// homeReachPoll is how often the preferred hub is asked for its routes
	// meanwhile.
	homeReachPoll = 250 * time.Millisecond
	// moveGrace and moveDrain bound how long the link to the hub a node
	// left stays up: at least moveGrace (the lookups under way there are
	// answered), at most moveDrain while circuits on it carry on.
	moveGrace = 2 * time.Second
	moveDrain = time.Minute
	// probeLogEvery repeats an unchanged probe failure in the log.
	probeLogEvery = 5 * time.Minute
)

// ErrMoved is why the link to a hub the node left closes (wrapped, with
// the hub it moved to): the reset of the circuits still on it says so.
var ErrMoved = errors.New("the node moved to its preferred hub")

// homeward is the run goroutine's state of returning (no one else reads
// it).
type homeward struct {
	wait     time.Duration // the pause before the next probe
	movedAt  time.Time     // the last move to a preferred hub
	logged   string        // the class of the last probe failure logged
	loggedAt time.Time
}

// fellBack is told that the session attached to a hub that is not its
// first choice after losing its hub: the first probe waits homeProbeMin,
// or twice the last wait if the node moved home less than homeStable ago.
func (h *homeward) fellBack(now time.Time) {
	if h.wait == 0 || h.movedAt.IsZero() || now.Sub(h.movedAt) >= homeStable {
		h.wait = homeProbeMin
		return
	}
	h.wait = min(2*h.wait, homeProbeMax)
}

// failed is told that a probe failed: the next waits twice as long.
func (h *homeward) failed() { h.wait = min(2*max(h.wait, homeProbeMin/2), homeProbeMax) }

// next is the pause before the next probe: wait ±10%.
func (h *homeward) next() time.Duration {
	w := max(h.wait, homeProbeMin)
	return w - w/10 + rand.N(w/5+1)
}

// probed is a probe's outcome: the link to a preferred hub that admitted
// the node (sl, its index in the hubs), ready to be installed, or why
// none did.
type probed struct {
	sl      *slink
	idx     int
	claimed *wire.Virtual // the virtual addresses claimed on sl (nil: none)
	reached bool          // sl's hub reaches the hub the node leaves
	err     error
}

// probe tries the hubs before cur (index idx) in order with a full
// attach; the first that admits the node and is readied (readyMove) is
// returned, else why none was (a *RoundError, by hub spec).
func (s *Session) probe(ctx context.Context, cur *slink, idx int) probed {
	var errs []string
	round := &RoundError{Errs: map[string]error{}}
	for j := range idx {
		spec := s.cfg.Hubs[j]
		sl, err := s.attachTo(ctx, spec)
		if err != nil {
			errs = append(errs, spec+": "+err.Error())
			round.Errs[spec] = err
			if ctx.Err() != nil {
				break
			}
			continue
		}
		p := probed{sl: sl, idx: j}
		if err = s.readyMove(ctx, &p, cur); err == nil {
			return p
		}
		sl.t.Close(err)
		errs = append(errs, spec+": "+err.Error())
		round.Errs[spec] = err
		if ctx.Err() != nil {
			break
		}
	}
	round.text = strings.Join(errs, "; ")
	return probed{err: round}
}

// readyMove readies a preferred hub's link before the node moves there:
// it waits (homeReach at most) until the hub reaches cur's hub, and
// claims the node's virtual addresses there.
func (s *Session) readyMove(ctx context.Context, p *probed, cur *slink) error {
	rctx, cancel := context.WithTimeout(ctx, homeReach)
	defer cancel()
	others := 0 // the other hubs the preferred hub reaches
	for !p.reached && cur.hub.ID != p.sl.hub.ID {
		hubs, err := s.hubsOn(rctx, p.sl)
		if err != nil && p.sl.t.IsClosed() {
			return err
		}
		others = reaches(hubs, p.sl.hub.ID)
		for _, r := range hubs {
			if r.Hub == cur.hub.ID && r.Reachable() {
				p.reached = true
			}
		}
		if p.reached || cur.t.IsClosed() {
			break
		}
		select {
		case <-rctx.Done():
		case <-cur.t.Done():
		case <-time.After(homeReachPoll):
			continue
		}
		break
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !p.reached && others == 0 && !cur.t.IsClosed() && cur.hub.ID != p.sl.hub.ID {
		// a hub that reaches no other would cut the node off the
		// overlay, unless the hub it leaves reaches none either (hubs
		// that do not link: failover only).
		hctx, cancel := context.WithTimeout(ctx, dialTimeout)
		hubs, err := s.hubsOn(hctx, cur)
		cancel()
		if n := reaches(hubs, cur.hub.ID); err == nil && n > 0 {
			return &IsolatedError{Hub: p.sl.hub.Name, Current: cur.hub.Name, Reached: n, Waited: homeReach}
		}
	}
	s.mu.Lock()
	want, wanted := s.vip.want, s.vip.wanted
	s.mu.Unlock()
	if wanted {
		cctx, cancel := context.WithTimeout(ctx, dialTimeout)
		err := s.claimOn(cctx, p.sl)
		cancel()
		if p.sl.t.IsClosed() || ctx.Err() != nil {
			return fmt.Errorf("hub %s: %w", p.sl.hub.Name, errors.Join(err, ctx.Err()))
		}
		if err != nil {
			s.logf("hub: node %s: %v", s.cfg.Machine, err)
		}
		p.claimed = &want
	}
	return nil
}

// reaches counts the reachable hubs of a hub's list, but itself.
func reaches(hubs []wire.RouteAd, self identity.ID) int {
	n := 0
	for _, r := range hubs {
		if r.Hub != self && r.Reachable() {
			n++
		}
	}
	return n
}

// IsolatedError is why a node does not move to a preferred hub that
// admitted it: that hub reaches no other hub (within Waited), while the
// node's current hub reaches Reached others; it would cut the node off
// the overlay.
type IsolatedError struct {
	Hub, Current string
	Reached      int
	Waited       time.Duration
}

func (e *IsolatedError) Error() string {
	return fmt.Sprintf("hub %s admits the node but reaches no other hub after %v, where hub %s reaches %d", e.Hub, e.Waited, e.Current, e.Reached)
}

// probeFailed records a failed probe and logs it, once per change of its
// class (direct.ErrorClass) or probeLogEvery.
func (s *Session) probeFailed(h *homeward, cur *slink, err error) {
	h.failed()
	class := direct.ErrorClass(err)
	if class == h.logged && time.Since(h.loggedAt) < probeLogEvery {
		return
	}
	h.logged, h.loggedAt = class, time.Now()
	s.logf("hub: node %s: staying on hub %s, no preferred hub to move to (%s); probing again in about %v",
		s.cfg.Machine, cur.hub.Name, err, h.wait)
}

// moveTo makes the readied link p.sl the current one (install), after
// which the link to the hub left, old, drains (retire).
func (s *Session) moveTo(h *homeward, old *slink, oldIdx int, p probed) bool {
	if !s.installWith(p.sl, p.idx, p.claimed) {
		return false
	}
	h.movedAt = time.Now()
	h.logged = ""
	why := fmt.Sprintf("hub %s is its choice number %d of %d, hub %s number %d, and admits it again", p.sl.hub.Name, p.idx+1, len(s.cfg.Hubs), old.hub.Name, oldIdx+1)
	if !p.reached && p.sl.hub.ID != old.hub.ID {
		why += fmt.Sprintf(" (it did not reach hub %s within %v)", old.hub.Name, homeReach)
	}
	s.logf("hub: node %s: moved from hub %s to hub %s: %s", s.cfg.Machine, old.hub.Name, p.sl.hub.Name, why)
	if old.version >= wire.VersionMoved && p.sl.hub.ID != old.hub.ID {
		// lookups there would find it at the hub it left until the link
		// closes: connections set up then would be reset with it
		old.t.SendControl(&wire.Message{Kind: wire.KMoved, Moved: &wire.Moved{To: p.sl.hub.ID}})
	}
	s.wg.Add(1)
	go s.retire(old, p.sl.hub.Name)
	return true
}

// retire keeps the link to a hub the node left up while circuits on it
// carry on (moveGrace at least, moveDrain at most), pinging it, then
// closes it with ErrMoved.
func (s *Session) retire(old *slink, to string) {
	defer s.wg.Done()
	start := time.Now()
	tick := time.NewTicker(moveGrace / 4)
	defer tick.Stop()
	pinged := start
	for {
		select {
		case <-s.done:
			old.t.Close(ErrClosed)
			return
		case <-old.t.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		in := now.Sub(start)
		switch {
		case in >= moveGrace && old.idle():
			old.t.Close(fmt.Errorf("%w %s", ErrMoved, to))
			return
		case in >= moveDrain:
			old.t.Close(fmt.Errorf("%w %s; circuits here ran past %v", ErrMoved, to, moveDrain))
			return
		case old.t.SilentFor() > NodeSilence:
			old.t.Close(&SilentError{old.t.SilentFor().Round(time.Millisecond)})
			return
		case now.Sub(pinged) >= NodePingEvery:
			old.t.Ping()
			pinged = now
		}
	}
}

// idle reports whether no circuit is on the link.
func (sl *slink) idle() bool {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return len(sl.circuits) == 0
}
