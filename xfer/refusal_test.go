package xfer

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/gridlink/gridlink/direct"
)

// Every refusal of a transfer is one of the refusal family (errors.Is
// direct.ErrRefused), through wrapping, keeping what it wrapped and its
// words; a write that found the file system full is no refusal.
func TestRefusalsAreErrRefused(t *testing.T) {
	for _, c := range []struct {
		err     error
		refusal bool
		also    error // wrapped besides, or nil
		words   string
	}{
		{&RefusedError{"refused by the receiver: no"}, true, nil, "refused by the receiver: no"},
		{&UnsafePathError{Path: "../x", Reason: "a name with .."}, true, errFrame, `xfer: the sender offered an entry named "../x", a name with ..: refused, nothing of it written`},
		{&UnaskedError{Path: "y", Asked: []string{"x"}}, true, errFrame, `xfer: the sender offered an entry named "y", but the copy asked for "x": refused, nothing of it written`},
		{&SourceNameError{Name: "a/b", Reason: "a name with a slash"}, true, nil, `xfer: a put names its source "a/b", a name with a slash: refused`},
		{&ReservedPathError{Path: StateFile}, true, nil, StateFile + ": reserved for the service's quota state (" + StateFile + "): not served or written"},
		{&QuotaError{Who: "this service", Quota: 10, Left: 1, Want: 5}, true, nil, "xfer: quota: the transfer's 5 bytes exceed the 1 bytes left of this service quota of 10 bytes: refused"},
		{&SpaceError{Dir: "/d", Size: 100, Free: 10, Want: 50}, true, syscall.ENOSPC, "xfer: no space: the transfer's 50 bytes exceed the 10 bytes free on the file system of /d (100 bytes, 0 kept in reserve): refused"},
		{&SpaceError{Dir: "/d", Size: 100, Path: "f"}, false, syscall.ENOSPC, "xfer: no space: f: the file system of /d (100 bytes) is full (no space left on device): stopped, the file not kept"},
	} {
		wrapped := fmt.Errorf("copy: %w", c.err)
		if got := errors.Is(wrapped, direct.ErrRefused); got != c.refusal {
			t.Errorf("%T %v: errors.Is ErrRefused = %v, want %v", c.err, c.err, got, c.refusal)
		}
		if c.also != nil && !errors.Is(wrapped, c.also) {
			t.Errorf("%T no longer wraps %v", c.err, c.also)
		}
		if got := c.err.Error(); got != c.words {
			t.Errorf("%T says %q, want %q", c.err, got, c.words)
		}
	}
}
