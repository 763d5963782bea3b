package direct

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gridlink/gridlink/identity"
)

// Every refusal, whatever it refused, is one type and one sentinel, and
// its words name what was refused, by whom when known, and the reason.
func TestRefusedErrorWords(t *testing.T) {
	k, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		err  *RefusedError
		want string
	}{
		{&RefusedError{Peer: k.ID(), Request: "7", Reason: "no listener on port 7 at b"}, "refused by the listener " + k.ID().Short() + ` (request "7"): no listener on port 7 at b`},
		{&RefusedError{What: RefusedConnection, Peer: k.ID(), Reason: "no listener on port 7 at b"}, "connection refused: no listener on port 7 at b"},
		{&RefusedError{What: RefusedConnection, Here: true, Reason: "no listener on port 7 at b"}, "connection refused here: no listener on port 7 at b"},
		{&RefusedError{What: RefusedLink, End: "b:7000", Reason: "accepts only encrypted links"}, "link refused by b:7000: accepts only encrypted links"},
	} {
		wrapped := fmt.Errorf("dial: %w", c.err)
		var re *RefusedError
		if !errors.Is(wrapped, ErrRefused) || !errors.As(wrapped, &re) || re != c.err {
			t.Errorf("%#v: not found as a refusal through wrapping", c.err)
		}
		if got := c.err.Error(); got != c.want {
			t.Errorf("%#v says %q, want %q", c.err, got, c.want)
		}
	}
}
