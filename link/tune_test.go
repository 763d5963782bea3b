package link

import (
	"context"
	"sync"
	"testing"
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

func tune(t *testing.T, m *model, limit int) ([]TuneStep, string, int) {
	t.Helper()
	m.at, m.streams = time.Now(), 1
	tu := startTuner(m, 0, limit)
	select {
	case <-tu.done:
	case <-time.After(20 * time.Second):
		tu.stop()
		t.Fatal("the tuner did not stop")
	}
	tu.mu.Lock()
	defer tu.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	return tu.steps, tu.why, m.streams
}

// The tuner grows while a step raises the rate by 10% or more: by 4x
// while the rate scales with the streams, else by 2x.
func TestTunerGrowsUntilStall(t *testing.T) {
	// 12 streams fill the path: 1 -> 2 doubles the rate (linear: next x4),
	// 8 give 8/12 (linear again), 32 all (+50%, not linear: next x2), 64
	// nothing more.
	m := &model{perStream: 1e6, capacity: 12e6, joinable: 100}
	steps, why, streams := tune(t, m, 128)
	if streams != 64 || why != "throughput stopped growing" {
		t.Fatalf("stopped at %d streams (%q), want 64 after the step that did not help; steps %v", streams, why, steps)
	}
	for i, want := range []int{1, 2, 8, 32, 64} {
		if i >= len(steps) || steps[i].Streams != want {
			t.Fatalf("steps %v, want streams 1, 2, 8, 32, 64", steps)
		}
	}
	if r := steps[3].Mbps; r < 0.8*96 || r > 1.2*96 {
		t.Errorf("32 streams measured %.1f Mbit/s, the model carries 96", r)
	}
	// A path that 3 streams fill: 2 add 100%, 8 add 50%: x2 from there.
	m = &model{perStream: 1e6, capacity: 3e6, joinable: 100}
	steps, _, streams = tune(t, m, 128)
	if streams != 16 || len(steps) != 4 || steps[2].Streams != 8 {
		t.Fatalf("a path of 3 streams: stopped at %d, steps %v; want 1, 2, 8, 16", streams, steps)
	}
}

func TestTunerBounds(t *testing.T) {
	m := &model{perStream: 1e6, capacity: 1e9, joinable: 100}
	if _, why, streams := tune(t, m, 8); streams != 8 || why != "at the bound" { // 1, 2, 8
		t.Errorf("limit 8: stopped at %d (%q)", streams, why)
	}
	m = &model{perStream: 1e6, capacity: 1e9, joinable: 3} // 1, 2, then 2 of the 6 asked for
	if _, why, streams := tune(t, m, 64); streams != 4 || why != "no stream could join: refused: the most this listener allows" {
		t.Errorf("acceptor taking 3 more: stopped at %d (%q)", streams, why)
	}
}

// An idle link is not tuned until data flows.
func TestTunerWaitsForData(t *testing.T) {
	m := &model{perStream: 0, capacity: 0, joinable: 100}
	m.at, m.streams = time.Now(), 1
	tu := startTuner(m, 0, 64)
	time.Sleep(3 * minInterval)
	tu.stop()
	if len(tu.steps) != 0 || m.streams != 1 {
		t.Fatalf("tuned an idle link: %v, %d streams", tu.steps, m.streams)
	}
}
