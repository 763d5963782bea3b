package matrix

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// explain decides by the error's type, not its words: a dial that timed
// out by its context is explained as no answer, and words that only
// quote "connection refused" are not a refusal.
func TestExplain(t *testing.T) {
	dial := func(err error) error { return &net.OpError{Op: "dial", Net: "tcp", Err: err} }
	for _, c := range []struct {
		err  error
		want string // in the explanation; "" for none
	}{
		{dial(os.NewSyscallError("connect", syscall.ECONNREFUSED)), "answered but rejected"},
		{dial(os.NewSyscallError("connect", syscall.ENETUNREACH)), "no route there"},
		{dial(os.ErrDeadlineExceeded), "no answer within 2s"},
		{fmt.Errorf("dial 10.0.0.1:7: %w", context.DeadlineExceeded), "no answer within 2s"},
		{errors.New(`the greeter said "connection refused"`), ""},
	} {
		got := explain(c.err, 2*time.Second)
		switch {
		case c.want == "" && got != c.err.Error():
			t.Errorf("explain(%q) = %q, want the error alone", c.err, got)
		case c.want != "" && (!strings.Contains(got, c.want) || !strings.HasPrefix(got, c.err.Error())):
			t.Errorf("explain(%q) = %q, want the error and %q", c.err, got, c.want)
		}
	}
}
