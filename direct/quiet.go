package direct

import (
	"sync"
	"time"
)

// Defaults of a Quiet.
const (
	DefaultQuietBurst    = 5
	DefaultQuietInterval = 10 * time.Second
)

// Quiet rate-limits log lines by reason, for what strangers can make a
// listener log (refused and failed handshakes, shed connections): in each
// interval the first Burst lines of a reason pass; the rest are only
// counted, and when the interval ends one summary line says how many
// more there were ("N more REASON since T"). A flood thus costs a few
// lines per reason per interval instead of one per connection. Safe for
// concurrent use.
type Quiet struct {
	burst    int
	interval time.Duration
	summary  func(reason string, more int, since time.Time)

	mu      sync.Mutex
	reasons map[string]*quietReason
}

type quietReason struct {
	since  time.Time // start of the interval
	passed int
	held   int
	timer  *time.Timer
}

// NewQuiet makes a Quiet that lets burst lines of a reason pass per
// interval (zero: the defaults) and calls summary (from a timer's
// goroutine) for the lines held back in an interval, once it ends.
func NewQuiet(burst int, interval time.Duration, summary func(reason string, more int, since time.Time)) *Quiet {
	if burst <= 0 {
		burst = DefaultQuietBurst
	}
	if interval <= 0 {
		interval = DefaultQuietInterval
	}
	return &Quiet{burst: burst, interval: interval, summary: summary, reasons: map[string]*quietReason{}}
}

// Allow reports whether a line of reason may be logged now; if not, it is
// counted for the interval's summary.
func (q *Quiet) Allow(reason string) bool {
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.reasons[reason] == nil && len(q.reasons) >= 64 {
		reason = "other" // reasons are a small fixed set; bound the map anyway
	}
	r := q.reasons[reason]
	if r != nil && r.timer == nil && now.Sub(r.since) >= q.interval {
		r = nil // its interval ended with nothing held back
	}
	if r == nil {
		r = &quietReason{since: now}
		q.reasons[reason] = r
	}
	if r.passed < q.burst {
		r.passed++
		return true
	}
	r.held++
	if r.timer == nil {
		end := r.since.Add(q.interval)
		r.timer = time.AfterFunc(max(time.Until(end), 0), func() { q.flush(reason) })
	}
	return false
}

// flush ends reason's interval: its summary, if lines were held back.
func (q *Quiet) flush(reason string) {
	q.mu.Lock()
	r := q.reasons[reason]
	if r == nil {
		q.mu.Unlock()
		return
	}
	delete(q.reasons, reason)
	held, since := r.held, r.since
	q.mu.Unlock()
	if held > 0 && q.summary != nil {
		q.summary(reason, held, since)
	}
}
