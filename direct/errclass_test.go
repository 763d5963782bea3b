package direct

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/gridlink/gridlink/pki"
)

// ErrorClass names a failure's kind from its type, whatever its words.
func TestErrorClass(t *testing.T) {
	joined := errors.Join(fmt.Errorf("a: %w", syscall.ECONNREFUSED), &net.OpError{Op: "dial", Err: os.ErrDeadlineExceeded})
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("dial x: %w", &RefusedError{Reason: "no"}), "refused"},
		{fmt.Errorf("x: %w", pki.ErrDenied), "denied"},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, "connection refused"},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}, "network unreachable"},
		{&net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, "timed out"},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), "timed out"},
		{joined, "connection refused; timed out"},
		{errors.Join(errors.New("one text"), fmt.Errorf("other: %w", syscall.ENETUNREACH)), "*errors.errorString; network unreachable"},
		{fmt.Errorf("port 1234: %w", errors.New("any words")), "*errors.errorString"},
		{fmt.Errorf("port 5678: %w", errors.New("other words")), "*errors.errorString"},
	} {
		if got := ErrorClass(c.err); got != c.want {
			t.Errorf("ErrorClass(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
