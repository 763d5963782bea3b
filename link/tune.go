package link

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/gridlink/gridlink/vconn"
)

// Tuning with Options.Streams = Auto: the dialler measures what the link
// moves (bytes sent plus bytes received, as the application sees them)
// over an interval of 8 round trips (at least minInterval, at most
// maxInterval; the round trip is the hello's). Once data flows it doubles
// the streams, lets the new ones ramp up for one interval, and measures
// again: it keeps growing while each step raised the rate by at least
// growth, and stops at the first that did not, at the bound, or when the
// acceptor refuses more. A step that nearly doubled the rate (linear:
// each stream is window-bound, far from what the path carries) makes the
// next one quadruple. One stream per step would take 64 steps to reach
// what a long, untuned path needs; this takes 4 (1, 2, 8, 32, 64).
const (
	minInterval = 200 * time.Millisecond
	maxInterval = 2 * time.Second
	growth      = 1.10
	linear      = 1.6 // a rate ratio per doubling this high: quadruple next
)

// TuneStep is one measurement of the tuner: the rate with that many
// streams.
type TuneStep struct {
	Streams int
	Mbps    float64
}

// tunable is what a tuner tunes: a link, or a model of one in tests.
type tunable interface {
	moved() int64                        // bytes carried so far, both ways
	join(ctx context.Context, k int) int // adds up to k streams, returns how many joined
	joinError() string                   // why the last join failed
}

type tuner struct {
	l        tunable
	interval time.Duration
	limit    int
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}

	mu    sync.Mutex
	steps []TuneStep
	why   string // why it stopped; "" while tuning
}

func startTuner(l tunable, rtt time.Duration, limit int) *tuner {
	ctx, cancel := context.WithCancel(context.Background())
	t := &tuner{l: l, interval: min(max(8*rtt, minInterval), maxInterval), limit: limit, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go t.run()
	return t
}

func (t *tuner) stop() {
	t.cancel()
	<-t.done
}

// dialled is a link being tuned by its dialler.
type dialled struct {
	c *Conn
	n *vconn.Node
}

func (d dialled) moved() int64 {
	return d.c.w.Stats().Written + d.c.r.Stats().Received
}

func (d dialled) join(ctx context.Context, k int) int { return d.c.join(ctx, d.n, k) }

func (d dialled) joinError() string { return d.c.Stats().JoinError }

func (t *tuner) sleep(d time.Duration) bool {
	select {
	case <-t.ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// measure returns the rate over one interval in Mbit/s, waiting first
// until data flows.
func (t *tuner) measure() (float64, bool) {
	for {
		before := t.l.moved()
		start := time.Now()
		if !t.sleep(t.interval) {
			return 0, false
		}
		n := t.l.moved() - before
		if n > 0 {
			return float64(n) * 8 / time.Since(start).Seconds() / 1e6, true
		}
	}
}

func (t *tuner) run() {
	defer close(t.done)
	rate, ok := t.measure()
	if !ok {
		return
	}
	streams, factor := 1, 2
	t.record(streams, rate, "")
	for {
		if streams >= t.limit {
			t.record(0, 0, "at the bound")
			return
		}
		added := t.l.join(t.ctx, min(streams*(factor-1), t.limit-streams))
		if t.ctx.Err() != nil {
			return
		}
		if added == 0 {
			t.record(0, 0, "no stream could join: "+t.l.joinError())
			return
		}
		streams += added
		if !t.sleep(t.interval) { // the new streams ramp up
			return
		}
		r, ok := t.measure()
		if !ok {
			return
		}
		t.record(streams, r, "")
		if r < rate*growth {
			t.record(0, 0, "throughput stopped growing")
			return
		}
		// per doubling of the streams this step: (r/rate)^(1/log2(grown))
		factor = 2
		if grown := float64(streams) / float64(streams-added); math.Pow(r/rate, 1/math.Log2(grown)) >= linear {
			factor = 4
		}
		rate = r
	}
}

func (t *tuner) record(streams int, mbps float64, why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if why != "" {
		t.why = why
		return
	}
	t.steps = append(t.steps, TuneStep{Streams: streams, Mbps: mbps})
}

// Tuning reports the tuner's measurements so far and why it stopped (""
// while it is still tuning). Nil unless the link was dialled with Auto.
func (c *Conn) Tuning() ([]TuneStep, string) {
	if c.tune == nil {
		return nil, ""
	}
	c.tune.mu.Lock()
	defer c.tune.mu.Unlock()
	return append([]TuneStep(nil), c.tune.steps...), c.tune.why
}
