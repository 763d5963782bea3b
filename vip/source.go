package vip

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/gridlink/gridlink/identity"
)

// A connection's peer may make the directory answer for sources not seen
// before at most sourceLookupBurst times at once and then sourceLookupRate
// times a second: an honest peer has two addresses, so a peer that cycles
// source addresses (to make every packet cost a lookup at the hubs) has
// its unknown sources refused, as spoofed, without asking.
const (
	sourceLookupBurst = 8
	sourceLookupRate  = 10
)

// sources is what one connection knows of which source addresses are its
// peer's: the directory's answers (at most maxSources, then all forgotten
// at once), each used for routeTTL and then asked again in the
// background while the old answer holds, so that the check costs a
// lookup only for a source not seen before.
type sources struct {
	n  *Network
	id identity.ID

	mu sync.Mutex
	m  map[netip.Addr]*sourceAnswer

	lookups *rate.Limiter // lookups of sources not seen before
}

type sourceAnswer struct {
	ok         bool // the directory says src is the peer's
	at         time.Time
	refreshing bool
}

// check reports whether src is the address of the connection's peer.
func (s *sources) check(src netip.Addr) bool {
	s.mu.Lock()
	if a := s.m[src]; a != nil {
		ok := a.ok
		if !a.refreshing && time.Since(a.at) > routeTTL {
			a.refreshing = true
			s.n.wg.Add(1)
			go s.refresh(src, a)
		}
		s.mu.Unlock()
		return ok
	}
	s.mu.Unlock()
	if !s.lookups.Allow() {
		return false
	}
	ok, known := s.ask(src)
	if known {
		s.mu.Lock()
		if len(s.m) >= maxSources {
			clear(s.m)
		}
		s.m[src] = &sourceAnswer{ok: ok, at: time.Now()}
		s.mu.Unlock()
	}
	return ok
}

// ask asks the directory whether src is the peer's; known is false when
// the lookup failed (the packet is refused, the answer not kept).
func (s *sources) ask(src netip.Addr) (ok, known bool) {
	ctx, cancel := context.WithTimeout(s.n.ctx, resolveTimeout)
	holder, err := s.n.cfg.Resolver.Resolve(ctx, src)
	cancel()
	if err != nil && !errors.Is(err, ErrNoNode) {
		return false, false
	}
	return err == nil && holder == s.id, true
}

func (s *sources) refresh(src netip.Addr, a *sourceAnswer) {
	defer s.n.wg.Done()
	ok, known := s.ask(src)
	s.mu.Lock()
	defer s.mu.Unlock()
	a.refreshing, a.at = false, time.Now()
	if known {
		a.ok = ok
	}
}
