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

// A peer may make the directory answer for sources not seen before at
// most sourceLookupBurst times at once and then sourceLookupRate times a
// second: an honest peer has two addresses, so a peer that cycles source
// addresses (to make every packet cost a lookup at the hubs) has its
// unknown sources refused, as spoofed, without asking.
const (
	sourceLookupBurst = 8
	sourceLookupRate  = 10
	// sourceRetry: a source the directory did not give the peer is asked
	// about again after sourceRetry (not routeTTL), and a refresh that
	// finds no node holding a source the peer was given is asked once
	// more after it, the answer holding meanwhile: a node whose hub died
	// claims its addresses again at another, and the directory is
	// without them for a moment (issue 35: a minute of its packets
	// dropped as spoofed, the connection's answer kept that long).
	sourceRetry = time.Second
)

// sources is what the Network knows of which source addresses are one
// peer's (for all its connections, one after another: the peer's
// counters hold it): the directory's answers (at most maxSources, then
// all forgotten at once), each used for routeTTL (a negative one for
// sourceRetry) and then asked again, in the background while a positive
// one holds, so that the check costs a lookup only for a source not seen
// before.
type sources struct {
	n  *Network
	id identity.ID

	mu sync.Mutex
	m  map[netip.Addr]*sourceAnswer

	lookups *rate.Limiter // lookups of sources not seen before
}

func newSources(n *Network, id identity.ID) *sources {
	return &sources{n: n, id: id, m: map[netip.Addr]*sourceAnswer{}, lookups: rate.NewLimiter(sourceLookupRate, sourceLookupBurst)}
}

type sourceAnswer struct {
	ok         bool // the directory says src is the peer's
	doubt      bool // a refresh found no node holding it: asked again after sourceRetry
	at         time.Time
	refreshing bool
}

// check reports whether src is the address of the peer.
func (s *sources) check(src netip.Addr) bool {
	s.mu.Lock()
	if a := s.m[src]; a != nil && (a.ok || time.Since(a.at) < sourceRetry) {
		ok := a.ok
		if ok && !a.refreshing && time.Since(a.at) >= routeTTL {
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
	holder, held, known := s.ask(src)
	ok := held && holder == s.id
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

// ask asks the directory who holds src: held is false when no node
// does; known is false when the lookup failed (the packet is refused,
// the answer not kept).
func (s *sources) ask(src netip.Addr) (holder identity.ID, held, known bool) {
	ctx, cancel := context.WithTimeout(s.n.ctx, resolveTimeout)
	holder, err := s.n.cfg.Resolver.Resolve(ctx, src)
	cancel()
	if err != nil && !errors.Is(err, ErrNoNode) {
		return holder, false, false
	}
	return holder, err == nil, true
}

// refresh asks again about a source given to the peer: another holder
// ends it; no holder ends it only when asked once more, sourceRetry
// later (the peer may be claiming it again at another hub just now).
func (s *sources) refresh(src netip.Addr, a *sourceAnswer) {
	defer s.n.wg.Done()
	holder, held, known := s.ask(src)
	s.mu.Lock()
	defer s.mu.Unlock()
	a.refreshing, a.at = false, time.Now()
	switch {
	case !known:
	case held:
		a.ok, a.doubt = holder == s.id, false
	case !a.doubt:
		a.doubt = true
		a.at = a.at.Add(sourceRetry - routeTTL)
	default:
		a.ok = false
	}
}
