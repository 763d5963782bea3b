package xfer

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Hold pauses a transfer: while it is paused the sender of the file data
// holds its next block (whole blocks only, so what was sent and what
// follows are the same bytes as without the pause; the link stays open,
// idle). Where the sender is:
//
//   - a put: this end, which waits between blocks;
//   - a push: the source service, which the caller tells with mHold and
//     mGo (wire.go) as the hold changes; the source's sender waits as a
//     put's does;
//   - a get: the service; a get cannot be paused (Options.Hold is
//     refused with ErrHoldGet), only cancelled.
//
// A rate limit counts the time sent, not the time held: a resumed
// transfer does not burst to catch up. The zero value is not paused; a
// Hold serves one transfer at a time.
type Hold struct {
	mu      sync.Mutex
	paused  bool
	resumed chan struct{} // closed when resumed; nil while not paused
	changed chan struct{} // closed and replaced at every change
	waiting int           // senders parked at the hold
	held    time.Duration // how long senders have waited in all
}

// ErrHoldGet is a get asked to run with a Hold: the service sends, and
// the protocol has no way to pause it.
var ErrHoldGet = fmt.Errorf("xfer: a get cannot be paused (the service sends it): cancel it instead")

// Pause makes the sender hold its next block, until Resume.
func (h *Hold) Pause() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.paused {
		return
	}
	h.paused, h.resumed = true, make(chan struct{})
	h.notifyLocked()
}

// Resume lets the sender go on.
func (h *Hold) Resume() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.paused {
		return
	}
	h.paused = false
	close(h.resumed)
	h.resumed = nil
	h.notifyLocked()
}

// Paused says whether the hold is paused.
func (h *Hold) Paused() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.paused
}

// Holding says whether a sender of this end is parked at the hold now
// (a put's; a push's sender is the source's).
func (h *Hold) Holding() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiting > 0
}

func (h *Hold) notifyLocked() {
	if h.changed != nil {
		close(h.changed)
	}
	h.changed = make(chan struct{})
}

// watch returns whether the hold is paused and a channel closed at its
// next change.
func (h *Hold) watch() (bool, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.changed == nil {
		h.changed = make(chan struct{})
	}
	return h.paused, h.changed
}

// wait returns at once while not paused, else once resumed or ctx is
// done (its error), or quit is closed. It returns how long it waited.
func (h *Hold) wait(ctx context.Context, quit <-chan struct{}) (time.Duration, error) {
	if h == nil {
		return 0, nil
	}
	h.mu.Lock()
	if !h.paused {
		h.mu.Unlock()
		return 0, nil
	}
	resumed := h.resumed
	h.waiting++
	h.mu.Unlock()
	start := time.Now()
	var err error
	select {
	case <-resumed:
	case <-ctx.Done():
		err = ctx.Err()
	case <-quit:
		err = context.Canceled
	}
	d := time.Since(start)
	h.mu.Lock()
	h.waiting--
	h.held += d
	h.mu.Unlock()
	return d, err
}

// sendHolds tells a push source the hold's changes (mHold, mGo) until
// done is closed or a send fails. It is the only writer on ep while it
// runs.
func sendHolds(ep *endpoint, h *Hold, done <-chan struct{}) {
	sent := false // the source starts unpaused
	for {
		paused, changed := h.watch()
		if paused != sent {
			typ := byte(mGo)
			if paused {
				typ = mHold
			}
			if ep.sendNow(typ) != nil {
				return
			}
			sent = paused
		}
		select {
		case <-changed:
		case <-done:
			return
		}
	}
}

// callerMessage decodes a message a push's caller may send once the
// push runs: mHold (true) or mGo (false), both empty. Anything else is
// an error, which ends the push.
func callerMessage(typ byte, p []byte) (hold bool, err error) {
	switch {
	case typ != mHold && typ != mGo:
		return false, fmt.Errorf("%w: message %d from a push's caller", errFrame, typ)
	case len(p) != 0:
		return false, fmt.Errorf("%w: %d bytes in a hold message, want none", errFrame, len(p))
	}
	return typ == mHold, nil
}

// heldPushes are a service's running pushes' holds.
type heldPushes struct {
	mu    sync.Mutex
	holds map[*Hold]bool
}

func (p *heldPushes) add(h *Hold) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holds == nil {
		p.holds = map[*Hold]bool{}
	}
	p.holds[h] = true
}

func (p *heldPushes) remove(h *Hold) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.holds, h)
}

// Holding is how many of the service's pushes have their sender parked
// at a pause their caller asked for (mHold) now.
func (s *Server) Holding() int {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	n := 0
	for h := range s.held.holds {
		if h.Holding() {
			n++
		}
	}
	return n
}
