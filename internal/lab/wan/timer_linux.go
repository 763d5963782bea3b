//go:build linux

package wan

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// sleeper waits for precise points in time for one pipe. It sleeps on a
// timerfd, which wakes the runtime's poller at the exact nanosecond (Go's
// own timers round to the poller's millisecond timeouts) and parks only
// the goroutine, not a thread; the spinner decides how early to wake and
// whether the last stretch may be spun away (see clock.go).
type sleeper struct {
	f   *os.File
	rc  syscall.RawConn
	sp  *spinner
	buf [8]byte
}

func newSleeper(sp *spinner) (*sleeper, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "timerfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &sleeper{f: f, rc: rc, sp: sp}, nil
}

// sleepUntil returns at deadline, or with an error once the sleeper has
// been closed. When the spinner grants the last stretch, it returns within
// a microsecond or so after deadline. Otherwise it returns where a plain
// timer wake-up is expected to land on average: it aims one mean wake-up
// latency early, and when it wakes closer to the deadline than that, it
// returns at once rather than sleep again and land late.
func (s *sleeper) sleepUntil(deadline int64) error {
	for {
		now := monoNow()
		d := deadline - now
		if d <= 0 {
			return nil
		}
		lat, early := s.sp.estimate()
		if d <= early && s.sp.acquire(now, d) {
			spinUntil(deadline)
			s.sp.done()
			return nil
		}
		if d <= lat {
			return nil
		}
		wake := deadline - lat
		if d > early {
			wake = deadline - early
		}
		if err := s.wait(wake - now); err != nil {
			return err
		}
		s.sp.observe(monoNow() - wake)
	}
}

// wait blocks for d ns on the timerfd.
func (s *sleeper) wait(d int64) error {
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(d)}
	var serr error
	if err := s.rc.Control(func(fd uintptr) {
		serr = unix.TimerfdSettime(int(fd), 0, &its, nil)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("timerfd_settime: %w", serr)
	}
	_, err := s.f.Read(s.buf[:])
	return err
}

// Close makes a pending and every later sleepUntil return an error.
func (s *sleeper) Close() error { return s.f.Close() }
