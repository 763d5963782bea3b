package wan

import (
	"math"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

func TestModelDelayOnly(t *testing.T) {
	m := NewModel(Link{Delay: 10 * time.Millisecond}, 1)
	for _, at := range []int64{0, 1, 5 * ms, 5 * ms, 100 * ms} {
		rel, v := m.Offer(at, 1500)
		if v != Deliver || rel != at+10*ms {
			t.Errorf("Offer(%d) = %d %v, want %d deliver", at, rel, v, at+10*ms)
		}
	}
}

func TestModelSerialization(t *testing.T) {
	// 12 Mbit/s: a 1500-byte packet takes exactly 1 ms on the wire.
	m := NewModel(Link{Delay: 5 * time.Millisecond, Rate: 12e6}, 1)
	// Back-to-back burst at t=0: departures at 1, 2, 3 ms.
	for i := int64(1); i <= 3; i++ {
		rel, v := m.Offer(0, 1500)
		if want := i*ms + 5*ms; v != Deliver || rel != want {
			t.Fatalf("burst packet %d: release %d %v, want %d", i, rel, v, want)
		}
	}
	if got := m.Backlog(ms); got != 3000 {
		t.Errorf("backlog at 1 ms = %d bytes, want 3000", got)
	}
	// Arriving while the link is still busy (until 3 ms): queued behind.
	if rel, _ := m.Offer(2500_000, 750); rel != 3*ms+ms/2+5*ms {
		t.Errorf("queued packet: release %d, want %d", rel, 3*ms+ms/2+5*ms)
	}
	// After an idle gap serialization starts at arrival.
	if rel, _ := m.Offer(50*ms, 1500); rel != 50*ms+ms+5*ms {
		t.Errorf("after idle: release %d, want %d", rel, 50*ms+ms+5*ms)
	}
	if got := m.Backlog(60 * ms); got != 0 {
		t.Errorf("backlog when idle = %d", got)
	}
}

func TestModelRateIsExact(t *testing.T) {
	// Saturate a 10 Mbit/s link with odd-sized packets for a long time:
	// the departure rate must be the configured rate to within rounding.
	const rate = 10e6
	m := NewModel(Link{Rate: rate, Queue: 1 << 30}, 1)
	var bytes int64
	var last int64
	for i := range 200000 {
		n := 40 + (i*7919)%1461
		rel, v := m.Offer(int64(i)*1000, n) // arrivals far faster than the rate
		if v != Deliver {
			t.Fatalf("packet %d dropped: %v", i, v)
		}
		if rel < last {
			t.Fatalf("release times went backwards at packet %d", i)
		}
		last = rel
		bytes += int64(n)
	}
	got := float64(bytes) * 8 / (float64(last) / 1e9)
	if math.Abs(got-rate)/rate > 1e-6 {
		t.Errorf("delivered %.3f bit/s, want %v", got, rate)
	}
}

func TestModelQueueTailDrop(t *testing.T) {
	// 12 Mbit/s, room for two 1500-byte packets: a burst of five keeps two.
	m := NewModel(Link{Rate: 12e6, Queue: 3000}, 1)
	var verdicts []Verdict
	for range 5 {
		_, v := m.Offer(0, 1500)
		verdicts = append(verdicts, v)
	}
	want := []Verdict{Deliver, Deliver, DropQueue, DropQueue, DropQueue}
	for i := range want {
		if verdicts[i] != want[i] {
			t.Fatalf("burst verdicts %v, want %v", verdicts, want)
		}
	}
	// Once one packet has left (1 ms), one fits again, and only one.
	if _, v := m.Offer(ms, 1500); v != Deliver {
		t.Errorf("after 1 ms: %v, want deliver", v)
	}
	if _, v := m.Offer(ms, 100); v != DropQueue {
		t.Errorf("queue full again: %v, want drop", v)
	}
	// A drop does not occupy the link: the accepted packet departs at 3 ms.
	if rel, v := m.Offer(3*ms, 1500); v != Deliver || rel != 4*ms {
		t.Errorf("after drain: release %d %v, want %d deliver", rel, v, 4*ms)
	}
}

func TestModelLoss(t *testing.T) {
	const n = 200000
	for _, p := range []float64{0.001, 0.01, 0.1, 0.5} {
		m := NewModel(Link{Loss: p, Delay: time.Millisecond}, 42)
		lost := 0
		for i := range n {
			if _, v := m.Offer(int64(i), 100); v == DropLoss {
				lost++
			}
		}
		// Within 5 standard deviations of the binomial mean.
		sd := math.Sqrt(n * p * (1 - p))
		if math.Abs(float64(lost)-n*p) > 5*sd {
			t.Errorf("loss %v: lost %d of %d, want %.0f ± %.0f", p, lost, n, n*p, 5*sd)
		}
	}
	if _, v := NewModel(Link{Loss: 1}, 1).Offer(0, 1); v != DropLoss {
		t.Errorf("loss 1 delivered a packet")
	}
}

func TestModelLossIsSeeded(t *testing.T) {
	seq := func(seed uint64) []Verdict {
		m := NewModel(Link{Loss: 0.3}, seed)
		var out []Verdict
		for i := range 64 {
			_, v := m.Offer(int64(i), 1)
			out = append(out, v)
		}
		return out
	}
	a, b, c := seq(7), seq(7), seq(8)
	same := func(x, y []Verdict) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Error("equal seeds gave different loss sequences")
	}
	if same(a, c) {
		t.Error("different seeds gave the same loss sequence")
	}
}

func TestQueueLimitDefault(t *testing.T) {
	for _, tc := range []struct {
		l    Link
		want int64
	}{
		{Link{}, DefaultQueue},
		{Link{Queue: 5000}, 5000},
		{Link{Rate: 10e6, Delay: 20 * time.Millisecond}, DefaultQueue},
		// 1 Gbit/s × 2 × 50 ms = 12.5 MB.
		{Link{Rate: 1e9, Delay: 50 * time.Millisecond}, 12_500_000},
	} {
		if got := tc.l.QueueLimit(); got != tc.want {
			t.Errorf("%+v: queue limit %d, want %d", tc.l, got, tc.want)
		}
	}
}

func TestFIFO(t *testing.T) {
	var f fifo
	next, want := 0, 0
	for round := range 50 {
		for range round % 7 * 20 {
			f.push(inflight{n: next})
			next++
		}
		for range round % 5 * 20 {
			if f.len() == 0 {
				break
			}
			if got := f.pop().n; got != want {
				t.Fatalf("popped %d, want %d", got, want)
			}
			want++
		}
	}
	for f.len() > 0 {
		if got := f.pop().n; got != want {
			t.Fatalf("popped %d, want %d", got, want)
		}
		want++
	}
	if want != next {
		t.Fatalf("popped %d packets, pushed %d", want, next)
	}
}

func TestFIFOGrowsAndShrinks(t *testing.T) {
	var f fifo
	for i := range 20000 {
		f.push(inflight{n: i})
	}
	grown := len(f.ring)
	for i := range 19990 {
		if got := f.pop().n; got != i {
			t.Fatalf("popped %d, want %d", got, i)
		}
	}
	if len(f.ring) >= grown/4 {
		t.Errorf("ring stayed at %d slots (from %d) for %d packets", len(f.ring), grown, f.len())
	}
	for i := 19990; i < 20000; i++ {
		if got := f.pop().n; got != i {
			t.Fatalf("popped %d, want %d", got, i)
		}
	}
}

func TestSpinnerBudget(t *testing.T) {
	s := newSpinner()
	now := s.refilled
	if !s.acquire(now, spinBurst/2) {
		t.Fatal("fresh spinner refused to spin")
	}
	if s.acquire(now, 1) {
		t.Fatal("two pipes spinning at once")
	}
	s.done()
	if s.acquire(now, spinBurst/2+1) {
		t.Fatal("spun beyond the budget")
	}
	// The budget refills at 1/spinShare of elapsed time.
	if !s.acquire(now+spinShare*10_000, spinBurst/2+1) {
		t.Fatal("budget did not refill")
	}
	s.done()

	// Wake-ups of 20..119 µs, uniformly, with every 20th a 10 ms stall:
	// the median is near 70 µs, the 90th percentile near 115 µs, and the
	// stalls barely count.
	for i := range 5000 {
		lat := int64(20_000 + (i*37)%100*1000)
		if i%20 == 0 {
			lat = 10_000_000
		}
		s.observe(lat)
	}
	lat, early := s.estimate()
	if lat < 60_000 || lat > 85_000 || early < 100_000 || early > 135_000 {
		t.Errorf("estimate: median %d ns, 90th percentile %d ns", lat, early)
	}
}

func BenchmarkModelOffer(b *testing.B) {
	m := NewModel(Link{Rate: 1e9, Delay: 10 * time.Millisecond, Loss: 0.01}, 1)
	var t int64
	for b.Loop() {
		t += 12000
		m.Offer(t, 1500)
	}
}
