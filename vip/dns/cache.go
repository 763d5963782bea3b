package dns

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// ErrNotFound is what a Lookup's (or LookupAddr's) error wraps when no
// node holds the name (or address): the answer is NXDOMAIN, cached for
// the TTL. Any other error is SERVFAIL, not cached.
var ErrNotFound = errors.New("dns: no node holds this name")

// LimitError is a lookup this server did not make: a client, or all of
// them together, asked for more names the cache did not hold than the
// limit allows. It is answered SERVFAIL.
type LimitError struct {
	Client netip.Addr // zero: the limit of all clients together
}

func (e *LimitError) Error() string {
	if e.Client.IsValid() {
		return "dns: client " + e.Client.String() + " is over its lookup limit"
	}
	return "dns: over the lookup limit of all clients"
}

// entry is a cached answer: addresses (or, for a reverse name, the node
// name), or not found.
type entry struct {
	addrs    []netip.Addr
	name     string
	notFound bool
	expires  time.Time
}

// call is a lookup under way; others asking the same name wait for it.
type call struct {
	done chan struct{}
	e    entry
	err  error
}

// cacheState is the server's cache, lookups under way and limiters.
type cacheState struct {
	mu       sync.Mutex
	entries  map[string]entry
	inflight map[string]*call
	clients  map[netip.Addr]*clientLimits
	lookups  *rate.Limiter // all clients' lookups
}

type clientLimits struct {
	queries, lookups *rate.Limiter
	seen             time.Time
}

// maxClients bounds the per-client limiters kept; past it the least
// recently seen are forgotten.
const maxClients = 4096

func (s *Server) client(c netip.Addr) *clientLimits {
	cs := &s.cache
	cl := cs.clients[c]
	if cl == nil {
		if len(cs.clients) >= maxClients {
			var oldest netip.Addr
			var t time.Time
			for a, o := range cs.clients {
				if t.IsZero() || o.seen.Before(t) {
					oldest, t = a, o.seen
				}
			}
			delete(cs.clients, oldest)
		}
		cl = &clientLimits{queries: rate.NewLimiter(rate.Limit(s.cfg.ClientQueries), s.cfg.ClientQueryBurst),
			lookups: rate.NewLimiter(rate.Limit(s.cfg.ClientLookups), s.cfg.ClientLookupBurst)}
		cs.clients[c] = cl
	}
	cl.seen = time.Now()
	return cl
}

// allowQuery reports whether client c may ask one more query now.
func (s *Server) allowQuery(c netip.Addr) bool {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	return s.client(c).queries.Allow()
}

// resolve is the addresses of node (lower case), from the cache or
// through Lookup.
func (s *Server) resolve(ctx context.Context, client netip.Addr, node string) ([]netip.Addr, error) {
	e, err := s.cached(ctx, client, "n:"+node, func(ctx context.Context) (entry, error) {
		addrs, err := s.cfg.Lookup(ctx, node)
		return entry{addrs: addrs}, err
	})
	if err != nil {
		return nil, err
	}
	if e.notFound {
		return nil, ErrNotFound
	}
	return e.addrs, nil
}

// resolveAddr is the name of the node holding a, from the cache or
// through LookupAddr.
func (s *Server) resolveAddr(ctx context.Context, client netip.Addr, a netip.Addr) (string, error) {
	e, err := s.cached(ctx, client, "a:"+a.String(), func(ctx context.Context) (entry, error) {
		name, err := s.cfg.LookupAddr(ctx, a)
		if err == nil && !nodeName.MatchString(name) {
			err = ErrNotFound // a node without a name a DNS name can carry
		}
		return entry{name: name}, err
	})
	if err != nil {
		return "", err
	}
	if e.notFound {
		return "", ErrNotFound
	}
	return e.name, nil
}

// cached is key's entry: from the cache while fresh, else from the one
// lookup under way for it, else from a new lookup if the client's and all
// clients' limits allow one (a *LimitError if not).
func (s *Server) cached(ctx context.Context, client netip.Addr, key string, lookup func(context.Context) (entry, error)) (entry, error) {
	cs := &s.cache
	now := time.Now()
	cs.mu.Lock()
	if e, ok := cs.entries[key]; ok && now.Before(e.expires) {
		cs.mu.Unlock()
		s.count(&s.stats.CacheHits)
		return e, nil
	}
	if c := cs.inflight[key]; c != nil {
		cs.mu.Unlock()
		select {
		case <-c.done:
			return c.e, c.err
		case <-ctx.Done():
			return entry{}, ctx.Err()
		}
	}
	if !s.client(client).lookups.Allow() {
		cs.mu.Unlock()
		s.count(&s.stats.Limited)
		return entry{}, &LimitError{Client: client}
	}
	if !cs.lookups.Allow() {
		cs.mu.Unlock()
		s.count(&s.stats.Limited)
		return entry{}, &LimitError{}
	}
	c := &call{done: make(chan struct{})}
	cs.inflight[key] = c
	cs.mu.Unlock()
	s.count(&s.stats.Lookups)

	lctx, cancel := context.WithTimeout(s.ctx, s.cfg.LookupTimeout)
	e, err := lookup(lctx)
	cancel()
	if errors.Is(err, ErrNotFound) {
		e, err = entry{notFound: true}, nil
	}
	if err == nil {
		e.expires = time.Now().Add(s.cfg.TTL)
	}
	c.e, c.err = e, err

	cs.mu.Lock()
	delete(cs.inflight, key)
	if err == nil {
		if len(cs.entries) >= s.cfg.CacheSize {
			s.evictLocked(time.Now())
		}
		cs.entries[key] = e
	}
	cs.mu.Unlock()
	close(c.done)
	return e, err
}

// evictLocked makes room in the cache: the expired entries go, and if
// none had, one entry (the map's first); cs.mu is held.
func (s *Server) evictLocked(now time.Time) {
	n := 0
	for k, e := range s.cache.entries {
		if !now.Before(e.expires) {
			delete(s.cache.entries, k)
			n++
		}
	}
	if n > 0 {
		return
	}
	for k := range s.cache.entries {
		delete(s.cache.entries, k)
		return
	}
}
