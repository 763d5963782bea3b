package direct

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
)

// Conn is a direct connection whose peer has proved its identity.
type Conn struct {
	*pki.Conn             // TLS, and the peer's verdict read before the first byte
	Peer      identity.ID // the other side, as proved in the handshake
	Request   string      // the ALPN request ("" for none)
	// Via is how the connection was made: the address dialled ("IP:PORT")
	// or the ssh transport spec, or on the accepting side the dialler's
	// address.
	Via string
	// Attempts is the dialling side's trace: every attempt Dial started, in
	// order, the winner's with a nil Err. Nil on the accepting side.
	Attempts []Attempt
}

// Attempt is one address tried by Dial.
type Attempt struct {
	Via     string        // the address ("IP:PORT") or ssh transport spec
	Start   time.Duration // when it started, since Dial began
	Elapsed time.Duration // how long it took to succeed or fail
	Err     error         // why it failed; nil for the winner
}

func (a Attempt) String() string {
	if a.Err == nil {
		return fmt.Sprintf("%s: connected in %v", a.Via, a.Elapsed.Round(time.Microsecond))
	}
	return fmt.Sprintf("%s: %v", a.Via, a.Err)
}

// DialError is a failed Dial: every address tried and why it failed.
type DialError struct {
	Target   identity.Machine
	Attempts []Attempt // in start order
	NotTried []string  // candidates not started (a refusal or the context ended the dial)
	Err      error     // the context's error, or nil
}

func (e *DialError) Error() string {
	var b strings.Builder
	b.WriteString("direct: dial")
	switch {
	case e.Target.ID.IsZero() && e.Target.Name == "":
	case e.Target.Name == "":
		fmt.Fprintf(&b, " %v", e.Target)
	default:
		fmt.Fprintf(&b, " %v (%s)", e.Target, e.Target.ID.Short())
	}
	switch {
	case len(e.Attempts) == 0 && e.Err != nil:
		fmt.Fprintf(&b, ": %v before any attempt", e.Err)
	case len(e.Attempts) == 0:
		b.WriteString(": no addresses to try")
	default:
		for i, a := range e.Attempts {
			if i == 0 {
				b.WriteString(": ")
			} else {
				b.WriteString("; ")
			}
			b.WriteString(a.String())
		}
	}
	if len(e.NotTried) > 0 {
		fmt.Fprintf(&b, "; not tried: %s", strings.Join(e.NotTried, ", "))
	}
	return b.String()
}

// Unwrap returns the attempts' errors and the context's, so errors.Is
// finds pki.ErrWrongPeer, ErrRefused, context.DeadlineExceeded...
func (e *DialError) Unwrap() []error {
	var errs []error
	for _, a := range e.Attempts {
		if a.Err != nil {
			errs = append(errs, a.Err)
		}
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// Refused returns the listener's refusal among the attempts, if any.
func (e *DialError) Refused() *RefusedError {
	for _, a := range e.Attempts {
		var re *RefusedError
		if errors.As(a.Err, &re) {
			return re
		}
	}
	return nil
}

// Attempts cancelled because another one won, or was refused.
var (
	errLost         = errors.New("cancelled: another address connected first")
	errAfterRefusal = errors.New("cancelled: the target refused at another address")
)
