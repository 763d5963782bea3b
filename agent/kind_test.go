package agent

import (
	"context"
	"fmt"
	"testing"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

// A setup error's kind comes from its type, wrapped as the layers wrap it:
// a link acceptor's refusal is the far side's policy, any other refusal
// the port's; a bad address is a bad request, whatever its words.
func TestKindOfTypedErrors(t *testing.T) {
	_, badAddr := identity.ParseAddr("be ta:22")
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("link: %w", &direct.RefusedError{What: direct.RefusedLink, End: "b", Reason: "accepts only encrypted links"}), control.KindNotAllowed},
		{fmt.Errorf("vconn: dial b:1: %w", &direct.RefusedError{What: direct.RefusedConnection, Reason: "no listener on port 1 at b"}), control.KindRefused},
		{fmt.Errorf("vconn: dial b:1: %w", &direct.RefusedError{Reason: "no listener on port 1 at b"}), control.KindRefused},
		{fmt.Errorf("agent: %w", badAddr), control.KindBadRequest},
		{fmt.Errorf("link to b:512: reading the acceptor's reply: %w", pki.ErrDenied), control.KindNotAllowed}, // refused in b's handshake
		{fmt.Errorf("x: %w", hub.ErrNotFound), control.KindUnknownName},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), control.KindTimeout},
		{&vconn.RaceError{}, control.KindUnreachable},
		{fmt.Errorf("refused: bad address"), control.KindFailed}, // words decide nothing
	} {
		if got := kindOf(c.err); got != c.want {
			t.Errorf("kindOf(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}
