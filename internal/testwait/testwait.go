// Package testwait is the one way tests wait for a condition that other
// goroutines or processes make true: poll it until it holds, or fail the
// test naming what did not happen and for how long it was awaited.
//
// It leaves waiting for a timer alone: a test that only waits for time to
// pass runs in a testing/synctest bubble instead, where time is synthetic
// (see portmap's renewal tests). Until works inside a bubble too: its sleeps
// advance the synthetic clock. A Log (log.go) is what a test's servers
// write and the test waits on, line by line.
package testwait

import (
	"testing"
	"time"
)

// Default is how long Until waits when within is zero: long enough for a
// loaded CI machine, short enough to fail a hung test quickly.
const Default = 10 * time.Second

// MaxPause is the longest Until sleeps between two looks at its condition.
const MaxPause = 250 * time.Millisecond

// Until polls cond until it returns true (every 10 ms at first, backing
// off to every 250 ms, so a cond that runs a command stays cheap), and fails the test
// (t.Fatalf, so only from the test's goroutine) when it has not within
// the given time (Default when zero), naming what was awaited.
func Until(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	if within <= 0 {
		within = Default
	}
	deadline := time.Now().Add(within)
	for pause := 10 * time.Millisecond; !cond(); pause = min(2*pause, MaxPause) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(pause)
	}
}
