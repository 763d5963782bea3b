package xfer

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/gridlink/gridlink/direct"
)

// Whatever the quotas, a receiver (a service, or a client getting files)
// refuses what would not fit on the file system it writes to: a plan
// larger than the free space of the destination's file system (as statfs
// reports it for unprivileged users), and each file larger than what is
// free where it goes, less a reserve of 1% of the file system and at most
// SpaceReserve. A plan is checked when it comes (not when resuming: much
// of it may be there already), each file when it is offered; files
// offered together, or another session writing at once, can still fill
// the file system: a write that finds it full (ENOSPC) stops the session
// with the same SpaceError, and the partial file is removed.

// SpaceReserve bounds the bytes a receiver keeps free on a file system:
// 1% of it, and at most this.
const SpaceReserve = 64 << 20

// SpaceError is a transfer that does not fit on the receiver's file
// system. It wraps syscall.ENOSPC.
type SpaceError struct {
	Dir     string // a directory of the file system, as the receiver names it
	Size    int64  // the file system's size, bytes
	Free    int64  // bytes free on it
	Reserve int64  // bytes kept free
	Want    int64  // bytes asked for; 0: a write found it full
	Path    string // the file; "" for the plan
}

func (e *SpaceError) Error() string {
	if e.Want == 0 {
		return fmt.Sprintf("xfer: no space: %s: the file system of %s (%d bytes) is full (no space left on device): stopped, the file not kept", e.Path, e.Dir, e.Size)
	}
	what := "the transfer's"
	if e.Path != "" {
		what = e.Path + ":"
	}
	return fmt.Sprintf("xfer: no space: %s %d bytes exceed the %d bytes free on the file system of %s (%d bytes, %d kept in reserve): refused",
		what, e.Want, max(e.Free-e.Reserve, 0), e.Dir, e.Size, e.Reserve)
}

func (e *SpaceError) Unwrap() error { return syscall.ENOSPC }

// Is makes a transfer refused for the space it asks for (Want) a refusal
// (direct.ErrRefused); a write that found the file system full is not
// one (it failed, and may succeed once space is freed).
func (e *SpaceError) Is(target error) bool { return target == direct.ErrRefused && e.Want > 0 }

// fits checks that n bytes fit on the file system of dir in t (path, the
// file they are for; "" for a plan). A file system whose space cannot be
// read is not checked.
func fits(t rootTree, dir string, n uint64, path string) error {
	if n == 0 {
		return nil
	}
	free, size, err := space(t, dir)
	if err != nil {
		return nil
	}
	reserve := min(size/100, SpaceReserve)
	if n+reserve <= free {
		return nil
	}
	return &SpaceError{Dir: dirName(t, dir), Size: int64(min(size, 1<<62)), Free: int64(min(free, 1<<62)), Reserve: int64(reserve), Want: int64(min(n, 1<<62)), Path: path}
}

// full words a write that found dir's file system full, for the file path.
func full(t rootTree, dir string, path string) *SpaceError {
	_, size, _ := space(t, dir)
	return &SpaceError{Dir: dirName(t, dir), Size: int64(min(size, 1<<62)), Path: path}
}

func isFull(err error) bool { return errors.Is(err, syscall.ENOSPC) }

func dirName(t rootTree, dir string) string {
	if n := t.Name(dir); n != "." {
		return n
	}
	return "the served root"
}

// space returns the bytes free (to unprivileged users) and the size of
// the file system of dir in t.
func space(t rootTree, dir string) (free, size uint64, err error) {
	d, err := t.r.Open(dir)
	if err != nil {
		return 0, 0, err
	}
	defer d.Close()
	return fsSpace(d)
}
