package nat

import (
	"sync"
	"time"
)

// The bookkeeping of splices that both splicing ends keep, nodes (package
// vconn, per target site) and hubs (package hub, per hub they link to):
// how long each waits for a rendezvous message, and when splicing toward
// a peer failed and how long to leave it be. The rejecting NAT's retry
// within an attempt is Punch's (connectRetrying).

// RendezvousWait bounds the wait for each rendezvous message of an
// attempt (the answer to an offer, the go after an answer).
const RendezvousWait = 5 * time.Second

// Backoff remembers, per peer, failed splices toward it and says when to
// try again: Min after the first failure, doubling with each further one
// in a row up to Max (Max <= Min: always Min). A success forgets the
// peer. Its zero value, with Min set, is ready; it is safe for concurrent
// use.
type Backoff[K comparable] struct {
	Min, Max time.Duration

	mu     sync.Mutex
	failed map[K]failures
}

type failures struct {
	last  time.Time // the latest
	count int       // in a row
}

// wait is how long after the latest of count failures to wait.
func (b *Backoff[K]) wait(count int) time.Duration {
	d := b.Min
	for i := 1; i < count && d < b.Max; i++ {
		d *= 2
	}
	return min(d, max(b.Max, b.Min))
}

// Failed records a failed splice toward k at time at.
func (b *Backoff[K]) Failed(k K, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed == nil {
		b.failed = map[K]failures{}
	}
	f := b.failed[k]
	b.failed[k] = failures{last: at, count: f.count + 1}
}

// Succeeded forgets k's failures.
func (b *Backoff[K]) Succeeded(k K) {
	b.mu.Lock()
	delete(b.failed, k)
	b.mu.Unlock()
}

// Forget forgets every peer's failures.
func (b *Backoff[K]) Forget() {
	b.mu.Lock()
	b.failed = nil
	b.mu.Unlock()
}

// Waiting says whether splicing toward k should wait still at time now,
// and when it last failed.
func (b *Backoff[K]) Waiting(k K, now time.Time) (last time.Time, waiting bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f, ok := b.failed[k]
	if !ok {
		return time.Time{}, false
	}
	return f.last, now.Sub(f.last) < b.wait(f.count)
}
