package testwait

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of stopping.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r) // Fatalf does not return
}

func TestUntilHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		go func() { time.Sleep(time.Second); n.Store(1) }()
		start := time.Now()
		Until(t, "the flag", 0, func() bool { return n.Load() == 1 })
		if el := time.Since(start); el < time.Second || el > time.Second+MaxPause {
			t.Errorf("returned after %v, want within one pause of the 1s the condition took", el)
		}
	})
}

func TestUntilTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{TB: t}
		start := time.Now()
		func() {
			defer func() {
				if p := recover(); p != r {
					panic(p)
				}
			}()
			Until(r, "a condition that never holds", 3*time.Second, func() bool { return false })
		}()
		if !strings.Contains(r.msg, "a condition that never holds") || !strings.Contains(r.msg, "3s") {
			t.Errorf("failure message %q does not name what and how long", r.msg)
		}
		if el := time.Since(start); el < 3*time.Second || el > 3*time.Second+MaxPause {
			t.Errorf("gave up after %v, want one pause past 3s", el)
		}
	})
}

// Log.Line finds the line that holds every part, also once another
// goroutine has written it; one that never comes fails, naming the parts.
func TestLogLine(t *testing.T) {
	var l Log
	l.Logf("exit for %s: opened", "alice")
	go l.Logf("exit refused %s: %s", "alice", "loopback")
	if got := l.Line(t, "refused", "alice", "loopback"); got != "exit refused alice: loopback" {
		t.Errorf("Line = %q", got)
	}
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{TB: t}
		func() {
			defer func() {
				if p := recover(); p != r {
					panic(p)
				}
			}()
			l.Line(r, "refused", "bob")
		}()
		if !strings.Contains(r.msg, `a log line with ["refused" "bob"]`) {
			t.Errorf("a line that never comes: %q", r.msg)
		}
	})
}
