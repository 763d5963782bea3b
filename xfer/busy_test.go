package xfer

import (
	"testing"
	"testing/synctest"
	"time"
)

// A resumed session takes a file over from one of the same user that
// still writes it (killed client, resumable link waiting to resume): the
// holder is ended and lets go. Another user's, or a session that does not
// resume, waits for the holder, up to busyWait.
func TestBusyTakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b busySet
		stopped := 0
		hold := func() {
			if !b.acquire("f", "alice", false, func() { stopped++; go b.release("f") }) {
				t.Fatal("a free file was not taken")
			}
		}
		hold()
		start := time.Now()
		if b.acquire("f", "bob", true, nil) {
			t.Fatal("bob took alice's file")
		}
		if stopped != 0 || time.Since(start) != busyWait {
			t.Fatalf("bob's takeover stopped alice's session %d times, waited %v", stopped, time.Since(start))
		}
		if b.acquire("f", "alice", false, nil) {
			t.Fatal("a session that does not resume took the file")
		}
		start = time.Now()
		if !b.acquire("f", "alice", true, nil) {
			t.Fatal("alice's resumed session did not take her file over")
		}
		if stopped != 1 || time.Since(start) != takeoverGrace {
			t.Fatalf("the takeover stopped the holder %d times and took %v, want once after %v", stopped, time.Since(start), takeoverGrace)
		}
		b.release("f")
	})
}

// A holder of the same owner that lets go within takeoverGrace (its
// client was cut, and it stores what reached it before the cut) is not
// ended: what it stored is kept (TestResumeIntoNewDirectory failed 9 of
// 40 runs when the takeover ended it at once).
func TestBusyTakeoverGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b busySet
		stopped := 0
		if !b.acquire("f", "alice", false, func() { stopped++; go b.release("f") }) {
			t.Fatal("a free file was not taken")
		}
		go func() {
			time.Sleep(takeoverGrace / 2)
			b.release("f")
		}()
		start := time.Now()
		if !b.acquire("f", "alice", true, nil) {
			t.Fatal("alice's resumed session did not get her file")
		}
		if stopped != 0 || time.Since(start) != takeoverGrace/2 {
			t.Fatalf("the holder was stopped %d times; took %v, want %v", stopped, time.Since(start), takeoverGrace/2)
		}
		b.release("f")
	})
}
