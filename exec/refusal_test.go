package exec

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gridlink/gridlink/direct"
)

// Every refusal of the exec service is one of the refusal family
// (errors.Is direct.ErrRefused), through wrapping, its words unchanged; a
// name service that could not be asked is no refusal.
func TestRefusalsAreErrRefused(t *testing.T) {
	for _, c := range []struct {
		err     error
		refusal bool
		words   string
	}{
		{&RefusedError{Node: "fe", Reason: "no mapping"}, true, "exec refused by fe: no mapping"},
		{&EnvRefusedError{Node: "fe", Name: "LD_PRELOAD", Why: "it loads code"}, true, "fe does not pass LD_PRELOAD to a command, whatever its accept list: it loads code; set it in the command line instead, where the account's shell decides"},
		{&AccountError{Name: "alice", Missing: true}, true, "no such local account"},
		{&AccountError{Name: "alice", Err: errors.New("getent: timed out")}, false, "it cannot be looked up: getent: timed out"},
	} {
		wrapped := fmt.Errorf("run: %w", c.err)
		if got := errors.Is(wrapped, direct.ErrRefused); got != c.refusal {
			t.Errorf("%T %v: errors.Is ErrRefused = %v, want %v", c.err, c.err, got, c.refusal)
		}
		if got := c.err.Error(); got != c.words {
			t.Errorf("%T says %q, want %q", c.err, got, c.words)
		}
	}
}
