package perf

import (
	"errors"
	"math"
	"testing"
	"time"
)

// The receiver's steady rate counts what it read in its own span, not what
// the sender handed over: a sender whose buffers grew during the span
// (a resumable link's window) counted more than the path carried.
func TestSteadyReceived(t *testing.T) {
	var tl timeline
	t0 := time.Unix(1000, 0)
	// 100 MB/s (800 Mbit/s) for the first 2 s, then 50 MB/s (400 Mbit/s),
	// one read every millisecond, the last at 13 s.
	var n int64
	for ms := 0; ms <= 13000; ms++ {
		if ms < 2000 {
			n += 100_000
		} else {
			n += 50_000
		}
		tl.note(t0.Add(time.Duration(ms)*time.Millisecond), n, func() int64 { return n })
	}
	ss, err := decodeTimeline(tl.encode())
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) > maxSamples || len(ss) < 1000 {
		t.Fatalf("%d samples", len(ss))
	}
	if last := ss[len(ss)-1]; last.at != 13*time.Second || last.bytes != n {
		t.Errorf("last sample %+v, want 13 s and %d bytes", last, n)
	}
	got, ok := steadyReceived(ss, 3*time.Second, 13*time.Second)
	if !ok || math.Abs(got-400) > 0.5 {
		t.Errorf("steady from 3 s to 13 s: %.2f Mbit/s (%v), want 400", got, ok)
	}
	// A run whose last byte came before the span's end counts to it.
	got, ok = steadyReceived(ss, 3*time.Second, 20*time.Second)
	if !ok || math.Abs(got-400) > 0.5 {
		t.Errorf("steady to the last byte: %.2f Mbit/s (%v), want 400", got, ok)
	}
	iv := receivedIntervals(ss, time.Second)
	if len(iv) != 13 || math.Abs(iv[0].Mbps-800) > 1 || math.Abs(iv[12].Mbps-400) > 1 || iv[12].T != 13 {
		t.Errorf("per second: %+v, want 13 intervals, 800 Mbit/s first, 400 last", iv)
	}
	if _, ok := steadyReceived(ss, 14*time.Second, 20*time.Second); ok {
		t.Error("a span after the last byte gave a rate")
	}
}

// The samples count what the link received off its connections, not what
// the application read: a link striped over connections delivers in
// bursts (a late block holds back the others, up to its reorder buffer),
// and the application's count over a span swings with what that buffer
// held at the span's ends. Here the link receives 50 MB/s throughout
// while the application reads nothing for 5 s (a block held back), then
// all of it: the rate over the span is the link's.
func TestTimelineCountsArrivals(t *testing.T) {
	var tl timeline
	t0 := time.Unix(1000, 0)
	var read, arrived int64
	for ms := 0; ms <= 13000; ms++ {
		arrived += 50_000
		if ms < 4000 || ms >= 9000 {
			read = arrived
		}
		tl.note(t0.Add(time.Duration(ms)*time.Millisecond), read, func() int64 { return arrived })
	}
	ss, err := decodeTimeline(tl.encode())
	if err != nil {
		t.Fatal(err)
	}
	for _, span := range [][2]time.Duration{{3 * time.Second, 13 * time.Second}, {3 * time.Second, 6 * time.Second}, {6 * time.Second, 8 * time.Second}} {
		if got, ok := steadyReceived(ss, span[0], span[1]); !ok || math.Abs(got-400) > 0.5 {
			t.Errorf("%v to %v: %.2f Mbit/s (%v), want 400", span[0], span[1], got, ok)
		}
	}
}

// A long run keeps at most maxSamples, evenly spread.
func TestTimelineBounded(t *testing.T) {
	var tl timeline
	t0 := time.Unix(1000, 0)
	for ms := 0; ms <= 3_600_000; ms += 5 {
		tl.note(t0.Add(time.Duration(ms)*time.Millisecond), int64(ms)*1000, func() int64 { return int64(ms) * 1000 })
	}
	b := tl.encode()
	ss, err := decodeTimeline(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) > maxSamples || len(ss) < maxSamples/2 {
		t.Fatalf("%d samples after an hour", len(ss))
	}
	got, ok := steadyReceived(ss, time.Minute, time.Hour)
	if !ok || math.Abs(got-8) > 0.01 {
		t.Errorf("steady %.3f Mbit/s, want 8", got)
	}
}

func TestDecodeTimelineRejects(t *testing.T) {
	good := func() []byte {
		var tl timeline
		t0 := time.Unix(1, 0)
		tl.note(t0, 10, func() int64 { return 10 })
		tl.note(t0.Add(20*time.Millisecond), 20, func() int64 { return 20 })
		return tl.encode()
	}
	if _, err := decodeTimeline(good()); err != nil {
		t.Fatal(err)
	}
	back := good()
	back[len(back)-1] = 0 // the last sample's bytes below the first's
	for name, b := range map[string][]byte{
		"short":     []byte("RXT"),
		"magic":     append([]byte("XXXX"), good()[4:]...),
		"truncated": good()[:len(good())-1],
		"too many":  append([]byte("RXTL\xff\xff\xff\xff"), make([]byte, 16)...),
		"goes back": back,
	} {
		if _, err := decodeTimeline(b); !errors.Is(err, ErrTimeline) {
			t.Errorf("%s: %v, want ErrTimeline", name, err)
		}
	}
}

func FuzzDecodeTimeline(f *testing.F) {
	var tl timeline
	t0 := time.Unix(1, 0)
	for ms := 0; ms < 50; ms += 7 {
		tl.note(t0.Add(time.Duration(ms)*time.Millisecond), int64(ms)*100, func() int64 { return int64(ms) * 100 })
	}
	f.Add(tl.encode())
	f.Add([]byte("RXTL\x00\x00\x00\x00"))
	f.Add([]byte("RXTL\x00\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ss, err := decodeTimeline(b)
		if err != nil {
			if !errors.Is(err, ErrTimeline) {
				t.Fatalf("error %v is not ErrTimeline", err)
			}
			return
		}
		if len(ss) > maxSamples {
			t.Fatalf("%d samples", len(ss))
		}
		for i := 1; i < len(ss); i++ {
			if ss[i].at < ss[i-1].at || ss[i].bytes < ss[i-1].bytes {
				t.Fatalf("sample %d goes back", i)
			}
		}
		if r, ok := steadyReceived(ss, time.Millisecond, time.Second); ok && (r < 0 || math.IsNaN(r)) {
			t.Fatalf("rate %v", r)
		}
	})
}
