package socks

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Throttling password guesses (RFC 1929). Every failed authentication
// delays its answer, by a delay that doubles with each failure from the
// same source address (Server.AuthDelay, up to Server.AuthDelayMax). One
// attempt per address is checked at a time, and the next only once the
// delay has passed, whichever connection it comes on: parallel
// connections guess no faster than one, and learn of a right guess no
// sooner. An attempt that could not be checked before its handshake
// times out is refused at once (ErrThrottled). A success clears the address's record; so does an hour
// without failures. At most Server.MaxPendingAuth authentications are
// under way at once; a client beyond that is refused at once.
const (
	defaultAuthDelay      = 500 * time.Millisecond
	defaultAuthDelayMax   = 8 * time.Second // under the default handshake timeout
	defaultMaxPendingAuth = 64
	// authForget is how long an address's failures are remembered.
	authForget = time.Hour
	// authSources bounds the addresses remembered; past it, the stalest
	// are dropped first.
	authSources = 4096
)

// ErrThrottled says an authentication was refused without a check: its
// source must wait longer than the client's handshake may last, or too
// many authentications were under way.
var ErrThrottled = errors.New("authentication throttled")

// source is one address's record: its failures and the token that lets
// one of its attempts be checked at a time.
type source struct {
	token    chan struct{}
	failures int
	next     time.Time // no attempt is checked before then
	last     time.Time // of the last failure
}

type throttle struct {
	once    sync.Once
	pending chan struct{}

	mu      sync.Mutex
	sources map[string]*source
}

func (t *throttle) init(max int) {
	t.once.Do(func() {
		t.pending = make(chan struct{}, max)
		t.sources = map[string]*source{}
	})
}

// sourceKey is the address a client's guesses are counted by: its IPv4
// address, or its IPv6 /64 (one host may hold all of one).
func sourceKey(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	switch {
	case !ok:
		return a.String()
	case ta.IP.To4() != nil:
		return ta.IP.To4().String()
	}
	return ta.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// acquire takes one of the pending authentications, or fails at once.
func (t *throttle) acquire() error {
	select {
	case t.pending <- struct{}{}:
		return nil
	default:
		return fmt.Errorf("%w: %d authentications under way", ErrThrottled, cap(t.pending))
	}
}

func (t *throttle) release() { <-t.pending }

// check runs ok for an attempt of src once no other attempt of src is
// being checked and src's delay has passed, or fails if that would be
// after deadline. A failure (ok false) delays src's next check and
// returns how long to hold the answer back.
func (t *throttle) check(src string, deadline time.Time, base, max time.Duration, ok func() bool) (bool, time.Duration, error) {
	t.mu.Lock()
	s := t.sources[src]
	if s == nil {
		t.prune(time.Now())
		s = &source{token: make(chan struct{}, 1)}
		t.sources[src] = s
	}
	t.mu.Unlock()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case s.token <- struct{}{}:
	case <-timer.C:
		return false, 0, fmt.Errorf("%w: %s has other attempts under way", ErrThrottled, src)
	}
	defer func() { <-s.token }()
	t.mu.Lock()
	next := s.next
	t.mu.Unlock()
	if d := time.Until(next); d > 0 {
		if next.After(deadline) {
			return false, 0, fmt.Errorf("%w: %s must wait %v after its failed guesses", ErrThrottled, src, d.Round(time.Millisecond))
		}
		time.Sleep(d)
	}
	if ok() {
		t.mu.Lock()
		if t.sources[src] == s {
			delete(t.sources, src)
		}
		t.mu.Unlock()
		return true, 0, nil
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(s.last) > authForget {
		s.failures = 0
	}
	d := base << min(s.failures, 30)
	if d > max || d <= 0 {
		d = max
	}
	s.failures++
	s.last = now
	s.next = now.Add(d)
	return false, d, nil
}

// prune drops forgotten records and, past authSources, the stalest; not
// those with an attempt under way.
func (t *throttle) prune(now time.Time) {
	if len(t.sources) < authSources {
		return
	}
	var stalest string
	for k, s := range t.sources {
		switch {
		case len(s.token) > 0:
		case now.Sub(s.last) > authForget:
			delete(t.sources, k)
		case stalest == "" || s.last.Before(t.sources[stalest].last):
			stalest = k
		}
	}
	if len(t.sources) >= authSources && stalest != "" {
		delete(t.sources, stalest)
	}
}
