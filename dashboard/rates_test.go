package dashboard

import (
	"testing"
	"time"

	"github.com/gridlink/gridlink/status"
)

// A steady 300 Mbit/s flow over a link's two parallel connections (one
// key), read at irregular moments (a reading 7 ms after
// another, as a state pushed after a change follows the periodic one; a
// late one), one of the two connections closing and a new one opening,
// the agent restarting: every rate is the flow's, within the blocks
// counted at once, never below zero, never a spike.
func TestRatesSteadyFlow(t *testing.T) {
	const rate = 300e6 / 8 // bytes per second
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	r := newRates()
	const block = 256 << 10 // a connection counts whole blocks
	conn := func(b float64) status.Conn {
		b = float64(int64(b/block) * block)
		return status.Conn{Local: "me:40001", Remote: "peer:22", SentBytes: uint64(b / 2), ReceivedBytes: uint64(b / 2)}
	}
	// offsets of the readings from t0, and what each connection counted
	// by then (the flow split evenly while both run)
	at := []time.Duration{0, time.Second, time.Second + 7*time.Millisecond, 2 * time.Second, 3*time.Second + 400*time.Millisecond,
		4 * time.Second, 4*time.Second + time.Millisecond, 5 * time.Second, 6 * time.Second, 7 * time.Second, 8*time.Second + 500*time.Millisecond, 9 * time.Second, 10 * time.Second}
	var points int
	for i, d := range at {
		total := rate * d.Seconds()
		var conns []status.Conn
		switch {
		case i < 7: // two connections share the flow
			conns = []status.Conn{conn(total / 2), conn(total / 2)}
		case i < 10: // the second closed at 5 s with its half; a new one took over
			half := rate * 5 / 2
			conns = []status.Conn{conn(half + (total-2*half)/2), conn((total - 2*half) / 2)}
		default: // the agent restarted at 8 s: counting from zero
			conns = []status.Conn{conn(rate * (d - 8*time.Second).Seconds())}
		}
		out := r.observe(t0.Add(d), conns)
		if len(out) != 1 || out[0].Key != "me:40001 → peer:22" {
			t.Fatalf("reading %d: %+v", i, out)
		}
		for _, p := range out[0].Points {
			if p.BytesPerS < 0 || p.BytesPerS > 1.05*rate {
				t.Errorf("reading %d at %v: a rate of %.0f B/s for a flow of %.0f B/s", i, d, p.BytesPerS, rate)
			}
		}
		if b := out[0].BytesPerS; b < 0 || b > 1.05*rate || i > 0 && b < 0.95*rate && len(out[0].Points) > 0 {
			t.Errorf("reading %d at %v: rate %.0f B/s for a flow of %.0f B/s", i, d, b, rate)
		}
		points = len(out[0].Points)
	}
	if points < 5 {
		t.Errorf("%d points for 8 s of readings; want the steps a second apart", points)
	}
	if out := r.observe(t0.Add(11*time.Second), nil); len(out) != 0 || len(r.conns) != 0 {
		t.Errorf("connections gone, still %+v", out)
	}
}

// Points are kept for a minute.
func TestRatesSpan(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	r := newRates()
	var out []ConnRate
	for s := 0; s <= 200; s++ {
		out = r.observe(t0.Add(time.Duration(s)*time.Second), []status.Conn{{Local: "a:1", Remote: "b:2", SentBytes: uint64(s) * 1000}})
	}
	if p := out[0].Points; len(p) == 0 || len(p) > 61 || out[0].BytesPerS != 1000 || t0.Add(200*time.Second).Sub(p[0].Time) > rateSpan {
		t.Errorf("%d points from %v, rate %v", len(p), p[0].Time, out[0].BytesPerS)
	}
}
