package link

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
)

// CompressAuto's rule. choose, a pure function of the estimates, expects
// the network's rate (net, wire bytes/s) without compression and, with
// codec c,
//
//	min(speed[c] × workers, net / ratio[c])
//
// stream bytes/s: what the workers can compress, or what the network can
// carry once compressed, whichever is less; and no more than the rate the
// Writer reached with c lately, if it was measured (the model does not
// see the cores the connections, the Reader or other processes take). It
// picks the best codec if it promises autoGain times net, else none.
//
// The estimates: each block or sample a codec compresses gives its speed
// (input bytes/s of one worker in wall time, so that competition for the
// cores counts) and ratio (payload on the wire / stream bytes, 1 if it
// did not shrink), as moving averages. Time is cut into windows of about
// autoWindow (one ends at the first block after it), and the Writer's
// counters over a window give:
//
//   - net, if the connections hardly ever waited for a block (less than
//     autoSaturated of their time): the network, not the Writer, set the
//     pace. Otherwise the window only says the network carries at least
//     what was sent;
//   - the rate reached with the codec in use, if Write waited for room
//     most of the window (the Writer, not the application, set the pace)
//     and the codec had been in use for a whole window before (the blocks
//     queued before went out meanwhile).
//
// A choice holds for at least two windows. A rate reached with a codec is
// forgotten after autoStale or when the number of connections changes, and so is net while compressing: the Writer
// then sends uncompressed for two windows to measure the network again
// (while compressing is the bottleneck, net is never measured).
const (
	autoWindow    = 100 * time.Millisecond
	autoSaturated = 0.1
	autoBlocked   = 0.5
	autoStale     = 5 * time.Second
	autoGain      = 1.1 // compressing must promise this much more than not
	trialEvery    = 16  // blocks between trials of a codec
	trialGap      = autoWindow / 2
	trialSample   = 64 << 10 // bytes of a block a trial compresses
	ewmaWeight    = 0.25
	trialWeight   = 0.5
	dataChanged   = 0.25 // a block's ratio this far from the average: try the other codec
)

// estimate is what choose decides from. Rates are bytes per second; 0
// means not known.
type estimate struct {
	net     float64            // wire bytes the connections carry
	workers int                // compression workers
	speed   [numCodecs]float64 // stream bytes one worker compresses
	ratio   [numCodecs]float64 // wire bytes per stream byte
	reached [numCodecs]float64 // stream bytes the Writer moved with the codec
}

// rate is the stream bytes/s expected with c (see above); 0 if unknown.
func (e estimate) rate(c codec) float64 {
	switch {
	case c == codecNone:
		return e.net
	case e.speed[c] <= 0 || e.ratio[c] <= 0:
		return 0
	}
	r := min(e.speed[c]*float64(e.workers), e.net/e.ratio[c])
	if e.reached[c] > 0 {
		r = min(r, e.reached[c])
	}
	return r
}

// choose picks how to send blocks: a codec if it promises more than
// autoGain times the uncompressed rate (the best one), else none. Without
// a measured network rate it does not compress.
func choose(e estimate) codec {
	if e.net <= 0 {
		return codecNone
	}
	best, rate := codecNone, e.net*autoGain
	for c := codecS2; c < numCodecs; c++ {
		if r := e.rate(c); r > rate {
			best, rate = c, r
		}
	}
	return best
}

// sendCounters are a Writer's running totals that auto measures by.
type sendCounters struct {
	raw, wire int64 // stream and wire bytes sent in data blocks
	starved   int64 // ns connections waited for a block, summed
	blocked   int64 // ns Write waited for room
	streams   int64 // connections now
}

// auto is CompressAuto's state: estimates, the current choice, trials.
type auto struct {
	mu      sync.Mutex
	est     estimate
	netAt   time.Time // when net was last measured
	reachAt [numCodecs]time.Time
	start   time.Time                        // of the current window
	at      sendCounters                     // at its start
	mode    codec                            // the choice for blocks other than trials
	held    int                              // windows ended since mode was chosen
	blocks  int64                            // blocks picked for
	trace   func(format string, args ...any) // if set (by tests), told about every window
	trial   [numCodecs]struct {
		block int64
		at    time.Time
	}
}

func newAuto(workers int) *auto {
	return &auto{est: estimate{workers: workers}, held: 2}
}

// pick returns the codec for the next block, ending the window if it is
// over, and a codec to try on a sample of the block (codecNone: none).
func (a *auto) pick(now time.Time, cnt sendCounters) (use, try codec) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.start.IsZero() {
		a.start, a.at = now, cnt
	} else if now.Sub(a.start) >= autoWindow {
		a.endWindow(now, cnt)
	}
	a.blocks++
	for c := codecS2; c < numCodecs; c++ {
		t := &a.trial[c]
		if c != a.mode && (t.at.IsZero() || a.blocks-t.block >= trialEvery && now.Sub(t.at) >= trialGap) {
			t.block, t.at = a.blocks, now
			return a.mode, c
		}
	}
	return a.mode, codecNone
}

// record takes the measure of one block (or trial sample) of n bytes that
// c compressed to wire bytes (0: it did not shrink) in d. Trials, rarer,
// weigh more.
func (a *auto) record(c codec, n, wire int, d time.Duration, trial bool) {
	ratio := 1.0
	if wire > 0 {
		ratio = float64(wire) / float64(n)
	}
	speed := float64(n) / max(d, time.Microsecond).Seconds()
	a.mu.Lock()
	defer a.mu.Unlock()
	if c == a.mode && math.Abs(ratio-a.est.ratio[c]) > dataChanged {
		for o := codecS2; o < numCodecs; o++ { // the data changed: try the others now
			a.trial[o].at = time.Time{}
		}
	}
	weight := ewmaWeight
	if trial {
		weight = trialWeight
	}
	a.est.ratio[c] = ewma(a.est.ratio[c], ratio, weight)
	a.est.speed[c] = ewma(a.est.speed[c], speed, weight)
}

func ewma(old, v, weight float64) float64 {
	if old == 0 {
		return v
	}
	return old + weight*(v-old)
}

// endWindow measures the window that ends now and chooses again.
func (a *auto) endWindow(now time.Time, cnt sendCounters) {
	secs := now.Sub(a.start).Seconds()
	raw, wire := float64(cnt.raw-a.at.raw), float64(cnt.wire-a.at.wire)
	starved := float64(cnt.starved-a.at.starved) / 1e9 / secs / float64(max(1, cnt.streams))
	blocked := float64(cnt.blocked-a.at.blocked) / 1e9 / secs
	if a.trace != nil {
		a.trace("%v window with %s: %.1f MB/s of stream, %.1f on the wire, connections starved %.0f%%, Write blocked %.0f%%",
			now.Sub(a.start).Round(time.Millisecond), a.mode, raw/secs/1e6, wire/secs/1e6, 100*starved, 100*blocked)
	}
	if cnt.streams != a.at.streams {
		// Another number of connections: the rates reached with each
		// codec were measured on another network (a link growing its
		// streams would otherwise hold on to what a codec reached with few).
		a.est.reached = [numCodecs]float64{}
	}
	a.start, a.at = now, cnt
	if wire > 0 {
		if starved < autoSaturated {
			a.est.net, a.netAt = ewma(a.est.net, wire/secs, 0.5), now
		} else {
			a.est.net = max(a.est.net, wire/secs)
		}
	}
	if a.mode != codecNone && a.held >= 1 && raw > 0 && blocked >= autoBlocked {
		if now.Sub(a.reachAt[a.mode]) > autoStale {
			a.est.reached[a.mode] = 0
		}
		a.est.reached[a.mode], a.reachAt[a.mode] = ewma(a.est.reached[a.mode], raw/secs, 0.5), now
	}
	for c := range a.est.reached {
		if now.Sub(a.reachAt[c]) > autoStale {
			a.est.reached[c] = 0
		}
	}
	a.held++
	if a.held < 2 {
		return
	}
	next := choose(a.est)
	if a.mode != codecNone && now.Sub(a.netAt) > autoStale {
		next = codecNone // measure the network again
	}
	if next != a.mode {
		a.mode, a.held = next, 0
	}
}

// String describes the estimates and the choice, for people.
func (a *auto) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%s; network %.1f MB/s", a.mode, a.est.net/1e6)
	for c := codecS2; c < numCodecs; c++ {
		fmt.Fprintf(&b, "; %s ratio %.2f at %.0f MB/s/worker", c, a.est.ratio[c], a.est.speed[c]/1e6)
		if r := a.est.reached[c]; r > 0 {
			fmt.Fprintf(&b, ", reached %.1f MB/s", r/1e6)
		}
	}
	return b.String()
}
