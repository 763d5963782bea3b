package nat

import (
	"testing"
	"time"
)

// A hub's policy: 5 s after a failure, doubling in a row up to 5 min; a
// success starts afresh. Time is given, not waited for.
func TestBackoffDoubles(t *testing.T) {
	b := Backoff[string]{Min: 5 * time.Second, Max: 5 * time.Minute}
	t0 := time.Unix(1000, 0)
	if _, w := b.Waiting("h", t0); w {
		t.Fatal("waiting before any failure")
	}
	for i, want := range []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute} {
		at := t0.Add(time.Duration(i) * time.Hour)
		b.Failed("h", at)
		if last, w := b.Waiting("h", at.Add(want-time.Millisecond)); !w || !last.Equal(at) {
			t.Errorf("failure %d: not waiting %v after it (last %v)", i+1, want-time.Millisecond, last)
		}
		if _, w := b.Waiting("h", at.Add(want)); w {
			t.Errorf("failure %d: still waiting %v after it", i+1, want)
		}
		if _, w := b.Waiting("other", at); w {
			t.Errorf("failure %d: another peer waits", i+1)
		}
	}
	b.Succeeded("h")
	b.Failed("h", t0)
	if _, w := b.Waiting("h", t0.Add(5*time.Second)); w {
		t.Error("after a success, the next failure waits more than Min")
	}
	b.Forget()
	if _, w := b.Waiting("h", t0); w {
		t.Error("waiting after Forget")
	}
}

// A node's policy: a fixed wait (Max unset), however many failures.
func TestBackoffFixed(t *testing.T) {
	b := Backoff[int]{Min: 10 * time.Minute}
	t0 := time.Unix(1000, 0)
	for range 3 {
		b.Failed(1, t0)
	}
	if _, w := b.Waiting(1, t0.Add(10*time.Minute-time.Second)); !w {
		t.Error("not waiting within the fixed wait")
	}
	if _, w := b.Waiting(1, t0.Add(10*time.Minute)); w {
		t.Error("waiting past the fixed wait")
	}
}
