package exec

import (
	"errors"
	"os"
	"testing"
	"time"
)

// The master of a pty is in Go's poller (non-blocking), so that closing
// it or a deadline ends a Read under way, also after a resize: were it
// blocking (an Fd call could make it so), SetReadDeadline would fail with
// os.ErrNoDeadline and a Read would hold its thread until the command
// writes or exits.
func TestPtyMasterIsPollable(t *testing.T) {
	m, s, err := openPty()
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	defer s.Close()
	defer m.Close()
	if err := m.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatalf("SetReadDeadline on the master: %v; want it in Go's poller", err)
	}
	if _, err := m.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	if err := setWinsize(m, 30, 100); err != nil {
		t.Fatal(err)
	}
	if err := m.SetReadDeadline(time.Time{}); err != nil {
		t.Fatalf("SetReadDeadline after setWinsize: %v; it must leave the master pollable", err)
	}
}
