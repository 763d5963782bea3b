package wan

import (
	"sync"
	"time"
)

// The emulator's clock: nanoseconds of the monotonic clock since the
// package was loaded. Arrival and release times in the pipes use it.
var epoch = time.Now()

func monoNow() int64 { return int64(time.Since(epoch)) }

// Precise release. Kernel timers wake a thread late. On the 2-vCPU VM
// this was built on (BenchmarkEmulatorWakeup, waits of 0.2-5 ms):
// time.Sleep is off by 610 µs on average (p99 1.1 ms: Go's timers ride on
// the poller's millisecond timeouts), clock_nanosleep(TIMER_ABSTIME) on a
// locked thread by 160 µs (p99 0.3-1.5 ms; it also holds a runtime P while
// blocked), a timerfd through the runtime poller by 120 µs (p99
// 0.2-1.2 ms), all of it the hypervisor's wake-up latency, worse under
// steal. The sleeper below gets 20 µs (p99 0.16 ms). A pipe sleeps on a
// timerfd until shortly before a release time and spins for the rest. How
// early it wakes follows the wake-up latency it observes; how much it may
// spin is rationed, so that precision never costs more than a small,
// fixed share of one CPU and never starves the rest of the process. When
// the ration is used up (a busy link releasing packets every few tens of
// microseconds), a pipe aims its timer one median latency early instead,
// so releases are right on average and off by the latency's jitter.
//
// The latency is tracked as quantiles (median and 90th percentile) by
// stochastic approximation: a sample above the estimate nudges it up, one
// below nudges it down, by steps weighted for the quantile. Unlike a mean,
// that shrugs off the millisecond stalls a shared machine throws in.
const (
	minEarly  = int64(20 * time.Microsecond)
	maxEarly  = int64(500 * time.Microsecond)
	spinShare = 10                            // at most 1/spinShare of one CPU is spent spinning
	spinBurst = int64(2 * time.Millisecond)   // spinning that may be saved up
	quantStep = int64(time.Microsecond)       // quantile tracking step
	initLat   = int64(100 * time.Microsecond) // starting estimate of both quantiles
)

// spinner is shared by all pipes of an emulator: it estimates the timer
// wake-up latency and hands out the right to spin. Only one pipe spins at
// a time, so at least one of the runtime's processors stays free to poll
// the devices and timers.
type spinner struct {
	mu       sync.Mutex
	p50, p90 int64 // estimated quantiles of the wake-up latency
	budget   int64 // ns of spinning available
	refilled int64 // when budget was last topped up
	spinning bool
}

func newSpinner() *spinner {
	return &spinner{p50: initLat, p90: initLat, budget: spinBurst, refilled: monoNow()}
}

// estimate returns the median timer wake-up latency and how long before a
// deadline to wake up so as to be early nine times out of ten.
func (s *spinner) estimate() (lat, early int64) {
	s.mu.Lock()
	lat, early = s.p50, s.p90
	s.mu.Unlock()
	return min(max(lat, 0), maxEarly), min(max(early, minEarly), maxEarly)
}

// observe feeds one measured wake-up latency into the estimate.
func (s *spinner) observe(lat int64) {
	s.mu.Lock()
	if lat > s.p50 {
		s.p50 += quantStep
	} else {
		s.p50 -= quantStep
	}
	if lat > s.p90 {
		s.p90 += 9 * quantStep
	} else {
		s.p90 -= quantStep
	}
	s.p50 = min(max(s.p50, 0), maxEarly)
	s.p90 = min(max(s.p90, s.p50), maxEarly)
	s.mu.Unlock()
}

// acquire grants the right to spin for d ns at now, if nobody else spins
// and the budget allows; the caller must call done afterwards.
func (s *spinner) acquire(now, d int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.budget = min(s.budget+(now-s.refilled)/spinShare, spinBurst)
	s.refilled = now
	if s.spinning || s.budget < d {
		return false
	}
	s.budget -= d
	s.spinning = true
	return true
}

func (s *spinner) done() {
	s.mu.Lock()
	s.spinning = false
	s.mu.Unlock()
}

// spinUntil busy-waits for the clock to reach deadline. It does not yield:
// yielding would keep the scheduler from ever polling the network while
// goroutines spin, and the wait is short and rationed anyway.
func spinUntil(deadline int64) {
	for monoNow() < deadline {
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
