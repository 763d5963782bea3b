package portmap

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"
)

// Mapping is a port mapping held at a gateway: renewed in the background
// until Close deletes it.
type Mapping struct {
	cfg      Config
	c        client
	internal uint16

	mu sync.Mutex
	st Status

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// newMapping asks c for the mapping and starts renewing it.
func newMapping(ctx context.Context, cfg Config, c client, internal uint16) (*Mapping, error) {
	m := &Mapping{cfg: cfg, c: c, internal: internal, stop: make(chan struct{}), done: make(chan struct{})}
	ext := cfg.ExternalPort
	if ext == 0 {
		ext = internal
	}
	g, err := m.request(ctx, ext)
	if err != nil {
		return nil, err
	}
	m.st = Status{Protocol: c.protocol(), Gateway: c.gateway(), Internal: netip.AddrPortFrom(c.local(), internal)}
	m.granted(g)
	go m.keep()
	return m, nil
}

// request asks for (or renews) the mapping, within twice the timeout.
func (m *Mapping) request(ctx context.Context, ext uint16) (grant, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*m.cfg.timeout())
	defer cancel()
	return m.c.add(ctx, m.internal, ext, m.cfg.lifetime())
}

// granted records a grant; m.mu must be held or m not yet shared.
func (m *Mapping) granted(g grant) {
	m.st.External = g.external
	m.st.Lifetime = g.lifetime
	m.st.Expires = time.Time{}
	if g.lifetime > 0 {
		m.st.Expires = time.Now().Add(g.lifetime)
	}
}

// Status returns the mapping's current state.
func (m *Mapping) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st
}

// External returns where the internet reaches the mapped port.
func (m *Mapping) External() netip.AddrPort { return m.Status().External }

// Protocol returns the protocol that made the mapping.
func (m *Mapping) Protocol() Protocol { return m.Status().Protocol }

// keep renews the mapping at half its lease until Close. A failed renewal
// is retried (see retryAfter); after the lease ran out it goes on trying,
// and the gateway may then grant another external port.
func (m *Mapping) keep() {
	defer close(m.done)
	last := time.Now()
	for {
		st := m.Status()
		if st.Lifetime == 0 { // permanent: nothing to renew
			<-m.stop
			return
		}
		wait := st.Lifetime/2 - time.Now().Sub(last)
		if st.Err != nil {
			wait = retryAfter(st.Expires.Sub(time.Now()), st.Lifetime)
		}
		select {
		case <-m.stop:
			return
		case <-time.After(wait):
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-m.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		g, err := m.request(ctx, st.External.Port())
		cancel()
		last = time.Now()
		m.mu.Lock()
		changed := err != nil || m.st.Err != nil
		if err != nil {
			m.st.Err = err
		} else {
			changed = changed || g.external != m.st.External
			m.st.Err = nil
			m.st.Renewals++
			m.granted(g)
		}
		st = m.st
		m.mu.Unlock()
		select {
		case <-m.stop:
			return
		default:
		}
		if changed && m.cfg.OnChange != nil {
			m.cfg.OnChange(st)
		}
	}
}

// retryAfter is the wait before retrying a failed renewal when left of a
// lease of lifetime remains: half of it, at least a second; once the lease
// ran out, half a lease, at least a second and at most half a minute.
func retryAfter(left, lifetime time.Duration) time.Duration {
	if left > 0 {
		return max(left/2, time.Second)
	}
	return max(min(lifetime/2, 30*time.Second), time.Second)
}

// Close stops renewing and deletes the mapping at the gateway, waiting
// for it at most the configured timeout (twice). Later calls return the
// first one's result.
func (m *Mapping) Close() error {
	m.closeOnce.Do(func() {
		close(m.stop)
		<-m.done
		ctx, cancel := context.WithTimeout(context.Background(), 2*m.cfg.timeout())
		defer cancel()
		st := m.Status()
		if err := m.c.remove(ctx, m.internal, st.External.Port()); err != nil {
			m.closeErr = fmt.Errorf("portmap: delete %s: %w", st, err)
		}
	})
	return m.closeErr
}
