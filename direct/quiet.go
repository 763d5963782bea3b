package direct

import (
	"sync"
	"time"
)

// Defaults of a Quiet.
const (
	DefaultQuietBurst    = 5
	DefaultQuietInterval = 10 * time.Second
	// maxQuietKinds bounds the kinds a Quiet tracks at once; a new kind
	// beyond it evicts the least recently used one (after its summary).
	maxQuietKinds = 64
)

// QuietKind names a kind of log line a Quiet counts: a small fixed noun
// of the caller's ("shed", "failed handshakes"), never an error's text
// or anything else a stranger chooses, so that one kind is one line of
// the summary however many different errors it covers.
type QuietKind string

// Quiet rate-limits log lines by kind, for what strangers can make a
// listener log (refused and failed handshakes, shed connections): in each
// interval the first Burst lines of a kind pass; the rest are only
// counted, and when the interval ends one summary line says how many
// more there were ("N more KIND since T"). A flood thus costs a few
// lines per kind per interval instead of one per connection. It tracks
// at most 64 kinds at once: a new one evicts the least recently used,
// whose held-back lines are summed up then. Safe for concurrent use.
type Quiet struct {
	burst    int
	interval time.Duration
	summary  func(kind QuietKind, more int, since time.Time)

	mu    sync.Mutex
	tick  uint64 // counts Allow calls: the recency of a kind
	kinds map[QuietKind]*quietKind
}

type quietKind struct {
	since  time.Time // start of the interval
	used   uint64    // Quiet.tick when last allowed or counted
	passed int
	held   int
	timer  *time.Timer
}

// NewQuiet makes a Quiet that lets burst lines of a kind pass per
// interval (zero: the defaults) and calls summary (from a timer's
// goroutine) for the lines held back in an interval, once it ends.
func NewQuiet(burst int, interval time.Duration, summary func(kind QuietKind, more int, since time.Time)) *Quiet {
	if burst <= 0 {
		burst = DefaultQuietBurst
	}
	if interval <= 0 {
		interval = DefaultQuietInterval
	}
	return &Quiet{burst: burst, interval: interval, summary: summary, kinds: map[QuietKind]*quietKind{}}
}

// Allow reports whether a line of kind may be logged now; if not, it is
// counted for the interval's summary.
func (q *Quiet) Allow(kind QuietKind) bool {
	now := time.Now()
	q.mu.Lock()
	q.tick++
	r := q.kinds[kind]
	if r != nil && r.timer == nil && now.Sub(r.since) >= q.interval {
		r = nil // its interval ended with nothing held back
	}
	var evicted QuietKind
	var gone *quietKind
	if r == nil {
		if q.kinds[kind] == nil && len(q.kinds) >= maxQuietKinds {
			evicted, gone = q.evictLocked()
		}
		r = &quietKind{since: now}
		q.kinds[kind] = r
	}
	r.used = q.tick
	allow := r.passed < q.burst
	if allow {
		r.passed++
	} else {
		r.held++
		if r.timer == nil {
			end := r.since.Add(q.interval)
			r.timer = time.AfterFunc(max(time.Until(end), 0), func() { q.flush(kind, r) })
		}
	}
	q.mu.Unlock()
	if gone != nil && gone.held > 0 && q.summary != nil {
		q.summary(evicted, gone.held, gone.since)
	}
	return allow
}

// evictLocked removes the least recently used kind and returns it with
// its timer stopped; its summary is the caller's (a flush already under
// way finds the kind gone and says nothing).
func (q *Quiet) evictLocked() (QuietKind, *quietKind) {
	var oldest QuietKind
	var r *quietKind
	for k, v := range q.kinds {
		if r == nil || v.used < r.used {
			oldest, r = k, v
		}
	}
	delete(q.kinds, oldest)
	if r.timer != nil {
		r.timer.Stop()
	}
	return oldest, r
}

// flush ends kind's interval r: its summary, if lines were held back.
func (q *Quiet) flush(kind QuietKind, r *quietKind) {
	q.mu.Lock()
	if q.kinds[kind] != r {
		q.mu.Unlock() // evicted, and summed up then
		return
	}
	delete(q.kinds, kind)
	held, since := r.held, r.since
	q.mu.Unlock()
	if held > 0 && q.summary != nil {
		q.summary(kind, held, since)
	}
}
