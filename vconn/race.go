package vconn

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
)

// race runs the possible methods (of via; nil: of all) with head starts
// and picks the most direct success: a less direct method that succeeds
// first waits a bounded time (graceFor) for more direct attempts still
// running.
func (n *Node) race(ctx context.Context, target identity.Machine, port uint16, via []Method) (result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var racing []Method
	errs := map[Method]error{}
	for _, m := range allMethods() {
		if !allowed(via, m) {
			continue
		}
		if err := n.possible(m, target); err != nil {
			errs[m] = err
			continue
		}
		racing = append(racing, m)
	}
	if len(racing) == 0 {
		return result{}, &RaceError{Target: target, Errs: errs, NoneApplied: true}
	}
	results := make(chan result, len(racing))
	reachedc := make(chan Method, len(racing))
	raceStart := time.Now()
	startOf := map[Method]time.Time{}
	kick := map[Method]chan struct{}{} // closed: start now, the head start is over
	var best *result
	for _, m := range racing {
		delay := n.startDelay(m)
		if delay > 0 && n.settled(m, racing, errs, target) {
			delay = 0
		}
		startOf[m] = raceStart.Add(delay)
		k := make(chan struct{})
		if delay == 0 {
			close(k)
		} else {
			kick[m] = k
		}
		mctx := context.WithValue(ctx, lastStepKey{}, func() {
			select {
			case reachedc <- m:
			default:
			}
		})
		go func() {
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-k:
			case <-ctx.Done():
				results <- result{method: m, err: ctx.Err()}
				return
			}
			results <- n.attempt(mctx, m, target, port, 1) // in a race, one splice attempt: routed stands by
		}()
	}
	// endHeadStarts starts at once the methods whose more direct rivals
	// are all settled.
	endHeadStarts := func() {
		for m, k := range kick {
			if (best == nil || m.rank() < best.method.rank()) && n.settled(m, racing, errs, target) {
				if now := time.Now(); now.Before(startOf[m]) {
					startOf[m] = now
				}
				close(k)
				delete(kick, m)
			}
		}
	}
	pending := len(racing)
	var grace <-chan time.Time
	reached := map[Method]time.Time{} // methods at their last step (lastStep), since when
	returned := map[Method]bool{}
	defer func() {
		// close what arrives after the decision.
		go func(left int) {
			for ; left > 0; left-- {
				if r := <-results; r.conn != nil && (best == nil || r.conn != best.conn) {
					r.conn.Close()
				}
			}
		}(pending)
	}()
	for pending > 0 {
		select {
		case m := <-reachedc:
			if _, ok := reached[m]; !ok {
				reached[m] = time.Now()
			}
		case r := <-results:
			pending--
			returned[r.method] = true
			if r.err != nil {
				errs[r.method] = r.err
				if errors.Is(r.err, direct.ErrRefused) {
					cancel()
					if best != nil {
						best.conn.Close()
						best = nil
					}
					return result{}, r.err
				}
				if best != nil && n.graceFor(best, racing, errs, startOf) <= 0 {
					return *best, nil
				}
				endHeadStarts()
				continue
			}
			if best != nil && best.method.rank() <= r.method.rank() {
				r.conn.Close()
				continue
			}
			if best != nil {
				best.conn.Close()
			}
			rr := r
			best = &rr
			wait := n.graceFor(best, racing, errs, startOf)
			if wait <= 0 {
				return *best, nil
			}
			grace = time.After(wait)
		case <-grace:
			if wait := n.lastStep(best, reached, returned); wait > 0 {
				grace = time.After(wait)
				continue
			}
			return *best, nil
		case <-ctx.Done():
			if best != nil {
				best.conn.Close()
				best = nil
			}
			return result{}, ctx.Err()
		}
	}
	if best != nil {
		return *best, nil
	}
	return result{}, raceError(target, errs)
}

// settled reports whether every method of the race more direct than m is
// settled: it has failed, or it could not plausibly work (see plausible).
// m's head start, which keeps it from competing with methods that may
// still work, is then pointless: waiting it out only delays the setup.
func (n *Node) settled(m Method, racing []Method, errs map[Method]error, target identity.Machine) bool {
	for _, o := range racing {
		if o.rank() < m.rank() && errs[o] == nil && n.plausible(o, target) {
			return false
		}
	}
	return true
}

// graceFor is how much longer to wait for methods more direct than best
// that are still running, and only those that could plausibly work: each
// gets until it would have finished had it worked. best's setup time gives
// the path's round trip (its setup takes setupTrips half round trips: a
// routed setup one, a reverse one two and a half, a splice three and a
// half); each other method needs its own setupTrips from its own start,
// plus a margin. Zero or less: take best now.
func (n *Node) graceFor(best *result, racing []Method, errs map[Method]error, startOf map[Method]time.Time) time.Duration {
	bestTrips := methods[best.method].setupTrips()
	if f, ok := methods[best.method].(interface{ fastestTrips() int }); ok {
		bestTrips = f.fastestTrips() // the round trip read from it is then not too short
	}
	rtt := best.elapsed * 2 / time.Duration(bestTrips)
	var until time.Time
	for _, o := range racing {
		if o.rank() < best.method.rank() && errs[o] == nil && n.plausible(o, best.target) {
			trips := n.setupTrips(o, best.target)
			need := rtt * time.Duration(trips) / 2
			if trips < bestTrips {
				// a method that costs fewer round trips than the one that
				// won would have finished within as long from its own
				// start, however loaded the machine.
				need = max(need, best.elapsed)
			}
			if t := startOf[o].Add(need + graceMargin); t.After(until) {
				until = t
			}
		}
	}
	return time.Until(until)
}

// setupTrips is how many half round trips a setup by m to target takes:
// the method's own count (setupTrips), and for a splice one round trip
// more for each end behind a sequential NAT, which observes its NAT's
// counter before it offers or answers (nat.Endpoints).
func (n *Node) setupTrips(m Method, target identity.Machine) int {
	trips := methods[m].setupTrips()
	if m == Splice {
		if n.sequentialNAT() {
			trips += 2
		}
		if target.NATSequential {
			trips += 2
		}
	}
	return trips
}

// lastStepKey carries, in an attempt's context, the function by which a
// method says its setup has reached its last step: a reverse setup's
// connection back has arrived and is in its handshake (checkDirect). The
// race's model of round trips (graceFor) misjudges a loaded host, whose
// handshakes take CPU the path's round trip does not show; a more direct
// method that got this far is all but done (CI: a reverse setup into
// nat-zoo's sequential host lost to routed in 1 of 4 attempts).
type lastStepKey struct{}

// lastStepFunc is ctx's lastStepKey function, or one that does nothing.
func lastStepFunc(ctx context.Context) func() {
	if f, ok := ctx.Value(lastStepKey{}).(func()); ok {
		return f
	}
	return func() {}
}

// lastStep is how much longer a race whose grace for best has run out
// waits, zero if not: for a more direct method still running that
// reached its last step (reached), until a round trip of best's path and
// twice graceMargin after it did; each method once (it is then dropped
// from reached).
func (n *Node) lastStep(best *result, reached map[Method]time.Time, returned map[Method]bool) time.Duration {
	bestTrips := methods[best.method].setupTrips()
	rtt := best.elapsed * 2 / time.Duration(bestTrips)
	var until time.Time
	for m, at := range reached {
		if m.rank() < best.method.rank() && !returned[m] {
			if t := at.Add(rtt + 2*graceMargin); t.After(until) {
				until = t
			}
		}
		delete(reached, m)
	}
	return time.Until(until)
}

// graceMargin covers processing time on the way (handshakes, hubs).
const graceMargin = 10 * time.Millisecond

// ErrNoMethod is wrapped by the error of a dial that no method won.
var ErrNoMethod = errors.New("no method reached the target")

// ErrNoneApplies is wrapped (besides ErrNoMethod) by the error of a dial
// that tried no method: none of those it could use could work toward the
// target (disabled, no hub at either end, no address to reach; the
// RaceError says why of each).
var ErrNoneApplies = errors.New("no method applies to the target")

// RaceError is a race that no method won: every method's error, each a
// *MethodError (errors.As on Errs' values). It unwraps to ErrNoMethod and,
// when the node has no hub, to the *NotAttachedError (which its text then
// names first), never to one method's cause, which is not the dial's.
type RaceError struct {
	Target identity.Machine
	Errs   map[Method]error
	// NoneApplied: no method was tried, none could work (ErrNoneApplies).
	NoneApplied bool
}

// notAttached is the *NotAttachedError one of e's methods met, or nil.
func (e *RaceError) notAttached() *NotAttachedError {
	var na *NotAttachedError
	for _, err := range e.Errs {
		if errors.As(err, &na) {
			return na
		}
	}
	return nil
}

func (e *RaceError) Error() string {
	na := e.notAttached()
	var parts []string
	for m, err := range e.Errs {
		if na != nil && errors.As(err, new(*NotAttachedError)) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: %v", m, err))
	}
	sort.Strings(parts)
	if na != nil {
		if len(parts) == 0 {
			return fmt.Sprintf("cannot reach %s: %v", e.Target, na)
		}
		return fmt.Sprintf("cannot reach %s: %v; %s", e.Target, na, strings.Join(parts, "; "))
	}
	return fmt.Sprintf("no method reached %s: %s", e.Target, strings.Join(parts, "; "))
}

func (e *RaceError) Unwrap() []error {
	errs := []error{ErrNoMethod}
	if e.NoneApplied {
		errs = append(errs, ErrNoneApplies)
	}
	if na := e.notAttached(); na != nil {
		errs = append(errs, na)
	}
	return errs
}

func raceError(target identity.Machine, errs map[Method]error) error {
	return &RaceError{Target: target, Errs: errs}
}
