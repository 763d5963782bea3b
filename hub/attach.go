package hub

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"strings"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// This file is a session's attachment in the background: Connect, the
// rounds of attempts and what they record, and what says why a session
// is not attached (NotAttachedError).

// NotAttachedError says that a session has no hub now: since when (the
// session's start, or the loss of its last hub) and why (the last
// attempt's failure, or what ended the lost link).
type NotAttachedError struct {
	Since time.Time
	Cause error
}

func (e *NotAttachedError) Error() string {
	return fmt.Sprintf("not attached to any hub since %s: %v", e.Since.Format(time.RFC3339), e.Cause)
}

func (e *NotAttachedError) Unwrap() error { return e.Cause }

// ErrFirstAttempt is why a session is not attached before its first
// round of attempts ended.
var ErrFirstAttempt = errors.New("the first attempt is under way")

// Connect returns a session at once that attaches in the background: to
// the first hub of cfg.Hubs that answers, in rounds with backoff, logging
// "attaching to HUB: reason, retrying" while none does, and again to the
// next one that answers whenever it loses its hub, until Close or a
// refusal that trying again cannot change (Refused, GaveUp). While it has
// no hub, its requests fail after a short wait with a *NotAttachedError.
func Connect(cfg SessionConfig) (*Session, error) {
	if cfg.Creds == nil {
		return nil, errors.New("hub: session without credentials")
	}
	if len(cfg.Hubs) == 0 {
		return nil, errors.New("hub: session without hubs")
	}
	id := cfg.Creds.Key.ID()
	if cfg.Machine.ID.IsZero() {
		cfg.Machine.ID = id
	}
	if cfg.Machine.ID != id {
		return nil, fmt.Errorf("hub: machine %s does not match the credentials' key %s", cfg.Machine.ID.Short(), id.Short())
	}
	if cfg.Machine.Name != "" {
		if err := identity.CheckName(cfg.Machine.Name); err != nil {
			return nil, fmt.Errorf("hub: %w", err) // every hub would refuse it (wire.RefusedBadName)
		}
	}
	cfg.Machine.Hub, cfg.Machine.HubName = identity.ID{}, ""
	if cfg.Dial == nil {
		cfg.Dial = DialTCP
	}
	s := &Session{cfg: cfg, machine: cfg.Machine, logf: cfg.Logf, ready: make(chan struct{}), lookups: map[uint64]chan *wire.Found{}, hubQueries: map[uint64]chan []wire.RouteAd{},
		messages: make(chan *wire.Routed, messageQueue), incoming: make(chan *Incoming, incomingQueue), done: make(chan struct{}),
		gaveUp: make(chan struct{}), firstRound: make(chan struct{}), since: time.Now(), cause: ErrFirstAttempt, instance: newInstance()}
	if s.logf == nil {
		s.logf = log.Printf
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.run()
	return s, nil
}

// WaitAttached waits until the session is attached (nil), refused (the
// refusal), closed (ErrClosed) or ctx is done (an error naming every hub's
// last failure).
func (s *Session) WaitAttached(ctx context.Context) error {
	for {
		s.mu.Lock()
		closed, refused, cur, ready, cause := s.closed, s.refused, s.cur, s.ready, s.cause
		s.mu.Unlock()
		switch {
		case closed:
			return ErrClosed
		case refused != nil:
			return refused
		case cur != nil:
			return nil
		}
		select {
		case <-ready:
		case <-s.done:
			return ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("hub: cannot attach to any hub (%v): %w", cause, ctx.Err())
		}
	}
}

// FirstRound is closed once the first round of attempts ended: attached,
// refused, or every hub failed once.
func (s *Session) FirstRound() <-chan struct{} { return s.firstRound }

// GaveUp is closed when the session stops attaching for a refusal
// (Refused says which).
func (s *Session) GaveUp() <-chan struct{} { return s.gaveUp }

// NotAttached says why the session has no hub now: nil while attached,
// the refusal after one (Refused), else a *NotAttachedError.
func (s *Session) NotAttached() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notAttachedLocked()
}

func (s *Session) notAttachedLocked() error {
	switch {
	case s.closed:
		return ErrClosed
	case s.refused != nil:
		return s.refused
	case s.cur != nil && !s.cur.t.IsClosed():
		return nil
	}
	return &NotAttachedError{Since: s.since, Cause: s.cause}
}

// HubSpecs are the hub specs the session attaches to, in order.
func (s *Session) HubSpecs() []string { return append([]string(nil), s.cfg.Hubs...) }

// run attaches, keeps the hub, and re-attaches to the next hub when it is
// lost, until Close or a refusal.
func (s *Session) run() {
	defer s.wg.Done()
	idx := 0
	var home homeward // the return to a preferred hub (home.go)
	for {
		sl, i, err := s.attachLoop(s.ctx, idx)
		if err != nil {
			if !errors.Is(err, ErrClosed) && s.ctx.Err() == nil {
				s.giveUp(err)
			}
			s.endFirstRound()
			return
		}
		if !s.install(sl, i) {
			return
		}
		s.endFirstRound()
		s.logf("hub: node %s: attached to hub %s", s.cfg.Machine, sl.hub.Name)
		if i > 0 {
			home.fellBack(time.Now())
		}
		for {
			var next probed
			next, err = s.keep(sl, i, &home)
			if next.sl == nil {
				break
			}
			if err != nil {
				// lost while a probe had a preferred hub admit it: no
				// old link to drain, the probe's is the re-attachment.
				s.logf("hub: node %s: lost hub %s: %v; re-attaching", s.cfg.Machine, sl.hub.Name, err)
				if !s.installWith(next.sl, next.idx, next.claimed) {
					return
				}
				s.logf("hub: node %s: attached to hub %s", s.cfg.Machine, next.sl.hub.Name)
				home.movedAt = time.Now()
			} else if !s.moveTo(&home, sl, i, next) {
				return
			}
			sl, i = next.sl, next.idx
		}
		if err == nil {
			return // closed
		}
		if errors.Is(err, ErrPermanent) {
			s.giveUp(err)
			return
		}
		s.logf("hub: node %s: lost hub %s: %v; re-attaching", s.cfg.Machine, sl.hub.Name, err)
		s.mu.Lock()
		if s.cur == nil || s.cur == sl {
			s.since, s.cause = time.Now(), fmt.Errorf("lost hub %s: %v", sl.hub.Name, err)
		}
		s.mu.Unlock()
		idx = (i + 1) % len(s.cfg.Hubs)
	}
}

func (s *Session) endFirstRound() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.firstRound:
	default:
		close(s.firstRound)
	}
}

// RoundError is why a round of attempts to attach failed: each hub spec's
// error ("SPEC: reason; SPEC: reason"); errors.Is and As see every one.
type RoundError struct {
	Errs map[string]error // by hub spec
	text string
}

func (e *RoundError) Error() string { return e.text }

func (e *RoundError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		out = append(out, err)
	}
	return out
}

// class is what rounds are compared by, to log a round again only when
// it failed differently: each hub's spec and the class of its error
// (direct.ErrorClass), never their words.
func (e *RoundError) class() string {
	var parts []string
	for spec, err := range e.Errs {
		parts = append(parts, spec+": "+direct.ErrorClass(err))
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// roundFailed records and logs why a round of attempts failed: "attaching
// to HUB: reason, retrying", once per change (of round.class) or minute.
func (s *Session) roundFailed(round *RoundError) {
	class := round.class()
	s.mu.Lock()
	s.cause = round
	again := class == s.logged && time.Since(s.loggedAt) < attachLogEvery
	if !again {
		s.logged, s.loggedAt = class, time.Now()
	}
	s.mu.Unlock()
	// Logged before the first round is declared over, so whoever waited
	// for it (a one-shot command) finds the reason already in the log.
	if !again {
		s.logf("hub: node %s: attaching to %s, retrying", s.cfg.Machine, round)
	}
	s.endFirstRound()
}
