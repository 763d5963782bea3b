package hub

import (
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// A round of attempts to attach is logged again when it failed
// differently (another class of error, from errors.Is and As), not when
// only its words changed (a port, an address), and again after
// attachLogEvery.
func TestRoundLoggedOncePerClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lines []string
		s := &Session{firstRound: make(chan struct{}), logf: func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }}
		refused := func(port int) error {
			return &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: port}, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}
		round := func(err error) *RoundError {
			return &RoundError{Errs: map[string]error{"hub-a": err}, text: "hub-a: " + err.Error()}
		}
		s.roundFailed(round(refused(7946)))
		s.roundFailed(round(refused(7947))) // other words, same class
		if len(lines) != 1 {
			t.Fatalf("two rounds refused alike logged %d lines, want 1: %q", len(lines), lines)
		}
		s.roundFailed(round(fmt.Errorf("dial: %w", os.ErrDeadlineExceeded)))
		if len(lines) != 2 {
			t.Fatalf("a round that failed differently logged %d lines in all, want 2: %q", len(lines), lines)
		}
		time.Sleep(attachLogEvery)
		s.roundFailed(round(fmt.Errorf("dial again: %w", os.ErrDeadlineExceeded)))
		if len(lines) != 3 {
			t.Errorf("after attachLogEvery, %d lines in all, want 3: %q", len(lines), lines)
		}
	})
}
