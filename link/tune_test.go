package link

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// model is a link whose rate depends on its number of streams, as a long
// path with small windows behaves: each stream adds perStream up to the
// path's capacity.
type model struct {
	mu        sync.Mutex
	perStream float64 // bytes/s
	capacity  float64
	streams   int
	bytes     float64
	at        time.Time
	joinable  int // streams the acceptor still takes
}

func (m *model) advance() {
	now := time.Now()
	m.bytes += min(float64(m.streams)*m.perStream, m.capacity) * now.Sub(m.at).Seconds()
	m.at = now
}

func (m *model) moved() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.advance()
	return int64(m.bytes)
}

func (m *model) join(_ context.Context, k int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.advance()
	k = min(k, m.joinable)
	m.joinable -= k
	m.streams += k
	return k
}

func (m *model) joinError() string { return "refused: the most this listener allows" }

// tune runs a tuner on m until it stops (in the caller's synctest
// bubble: the model's rates and the tuner's intervals are exact) and
// returns its steps, why it stopped, the streams m ended with and how
// long the tuning took.
func tune(t *testing.T, m *model, limit int) ([]TuneStep, string, int, time.Duration) {
	t.Helper()
	start := time.Now()
	m.at, m.streams = start, 1
	tu := startTuner(m, 0, limit)
	select {
	case <-tu.done:
	case <-time.After(20 * time.Second):
		tu.stop()
		t.Fatal("the tuner did not stop")
	}
	took := time.Since(start)
	tu.mu.Lock()
	defer tu.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	return tu.steps, tu.why, m.streams, took
}

// The tuner grows while a step raises the rate by 10% or more: by 4x
// while the rate scales with the streams, else by 2x. On synthetic time
// each step's rate is the model's exactly, and the tuning takes exactly
// one interval to see data, then two per step (ramp up, measure).
func TestTunerGrowsUntilStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 12 streams fill the path: 1 -> 2 doubles the rate (linear: next x4),
		// 8 give 8/12 (linear again), 32 all (+50%, not linear: next x2), 64
		// nothing more.
		m := &model{perStream: 1e6, capacity: 12e6, joinable: 100}
		steps, why, streams, took := tune(t, m, 128)
		if streams != 64 || why != "throughput stopped growing" {
			t.Fatalf("stopped at %d streams (%q), want 64 after the step that did not help; steps %v", streams, why, steps)
		}
		want := []TuneStep{{1, 8}, {2, 16}, {8, 64}, {32, 96}, {64, 96}}
		if !slices.Equal(steps, want) {
			t.Fatalf("steps %v, want %v (streams, Mbit/s)", steps, want)
		}
		if took != 9*minInterval {
			t.Errorf("tuning took %v, want 9 intervals of %v", took, minInterval)
		}
		// A path that 3 streams fill: 2 add 100%, 8 add 50%: x2 from there.
		m = &model{perStream: 1e6, capacity: 3e6, joinable: 100}
		steps, _, streams, took = tune(t, m, 128)
		want = []TuneStep{{1, 8}, {2, 16}, {8, 24}, {16, 24}}
		if streams != 16 || !slices.Equal(steps, want) || took != 7*minInterval {
			t.Fatalf("a path of 3 streams: stopped at %d after %v, steps %v; want %v after 7 intervals", streams, took, steps, want)
		}
	})
}

func TestTunerBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &model{perStream: 1e6, capacity: 1e9, joinable: 100}
		if _, why, streams, took := tune(t, m, 8); streams != 8 || why != "at the bound" || took != 5*minInterval { // 1, 2, 8
			t.Errorf("limit 8: stopped at %d (%q) after %v", streams, why, took)
		}
		m = &model{perStream: 1e6, capacity: 1e9, joinable: 3} // 1, 2, then 2 of the 6 asked for
		if _, why, streams, _ := tune(t, m, 64); streams != 4 || why != "no stream could join: refused: the most this listener allows" {
			t.Errorf("acceptor taking 3 more: stopped at %d (%q)", streams, why)
		}
	})
}

// An idle link is not tuned until data flows; then it is, one interval
// later.
func TestTunerWaitsForData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &model{perStream: 0, capacity: 0, joinable: 100}
		m.at, m.streams = time.Now(), 1
		tu := startTuner(m, 0, 64)
		defer tu.stop()
		time.Sleep(3*minInterval + minInterval/2)
		tu.mu.Lock()
		if len(tu.steps) != 0 {
			t.Errorf("tuned an idle link: %v", tu.steps)
		}
		tu.mu.Unlock()
		m.mu.Lock()
		if m.streams != 1 {
			t.Errorf("an idle link grew to %d streams", m.streams)
		}
		m.advance()
		m.perStream, m.capacity = 1e6, 1e9 // data flows from here
		m.mu.Unlock()
		time.Sleep(minInterval / 2)
		synctest.Wait()
		tu.mu.Lock()
		defer tu.mu.Unlock()
		if want := []TuneStep{{1, 4}}; !slices.Equal(tu.steps, want) {
			t.Errorf("steps %v once data flowed half an interval, want %v", tu.steps, want)
		}
	})
}
