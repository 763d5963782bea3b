package vconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/nat"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/wire"
)

// Why a method failed, as facts: which end the cause lies at and what was
// measured there. Races decide by them (errors.Is), and Explain builds its
// words from them, never from error text.

// End names the end of a connection a failure's cause lies at.
type End int

// Ends of a connection.
const (
	EndUnknown End = iota
	Local          // this host, the dialling node
	Remote         // the target node
	Path           // between them: the hubs, or the network both ends' packets cross
)

func (e End) String() string {
	switch e {
	case Local:
		return "this host"
	case Remote:
		return "target"
	case Path:
		return "path"
	}
	return "unknown"
}

// Cause kinds of a MethodError (its Cause; errors.Is finds them).
var (
	ErrDisabled     = errors.New("method disabled")
	ErrNoHub        = errors.New("not attached to a hub")
	ErrNoAddress    = errors.New("no address")
	ErrNoRoute      = errors.New("no route in the dialling end's routing table") // that end is on a non-routed network
	ErrUnreachable  = errors.New("a router answered unreachable")
	ErrTimeout      = errors.New("no answer")
	ErrRejected     = errors.New("connection reset") // a rejecting firewall, or nothing listening at the address
	ErrRandomNAT    = errors.New("NAT allocates ports at random")
	ErrNATUnknown   = errors.New("NAT not classified")
	ErrPunch        = errors.New("simultaneous open made no connection")
	ErrSpliceRecent = errors.New("splicing failed recently")
	ErrNoHubRoute   = errors.New("no route between the hubs")
	ErrNotAttached  = errors.New("target not attached to its hub")
)

// MethodError is a method's failure toward a target: End is where its
// cause lies, Cause one of the kinds above (or direct.ErrRefused, pki.ErrDenied,
// pki.ErrWrongPeer; nil if none applies), Err the error with its details,
// whose text it keeps.
type MethodError struct {
	Method Method
	End    End
	Cause  error
	Err    error
}

func (e *MethodError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("%v (%s)", e.Cause, e.End)
	}
	return e.Err.Error()
}

func (e *MethodError) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.Cause, e.Err} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func methodErr(m Method, end End, cause, err error) *MethodError {
	return &MethodError{Method: m, End: end, Cause: cause, Err: err}
}

// failError is a reverse-fail or splice-fail: the answering node's (or a
// hub's) measured cause (a wire.Fail code) and its words.
type failError struct {
	code, reason string
}

func (e *failError) Error() string { return e.reason }

// Unwrap is, for a port refused, the refusal as a *direct.RefusedError.
func (e *failError) Unwrap() error {
	if e.code == wire.FailPortRefused {
		return &direct.RefusedError{What: direct.RefusedConnection, Reason: e.reason}
	}
	return nil
}

// classify turns the error of method m's attempt into a *MethodError of
// facts (an error that is one already, a context's end and nil pass as
// they are): the causes every method can meet, then the method's own
// (method.cause).
func (n *Node) classify(m Method, err error) error {
	var me *MethodError
	if err == nil || errors.As(err, &me) || errors.Is(err, context.Canceled) {
		return err
	}
	var fe *failError
	switch {
	case errors.As(err, &fe):
		end, cause := failCause(fe.code)
		return methodErr(m, end, cause, err)
	case errors.Is(err, direct.ErrRefused):
		return methodErr(m, Remote, direct.ErrRefused, err)
	case errors.Is(err, pki.ErrWrongPeer):
		return methodErr(m, Remote, pki.ErrWrongPeer, err)
	case errors.Is(err, pki.ErrDenied):
		return methodErr(m, Remote, pki.ErrDenied, err)
	case errors.Is(err, hub.ErrUnreachable):
		return methodErr(m, Path, ErrNoHubRoute, err)
	}
	if mm := methods[m]; mm != nil {
		if end, cause, ok := mm.cause(n, err); ok {
			return methodErr(m, end, cause, err)
		}
	}
	return methodErr(m, EndUnknown, nil, err)
}

// natCause says why this host's NAT keeps its endpoints from being
// predicted, as last classified.
func (n *Node) natCause() error {
	n.self.mu.Lock()
	st := n.self.nat
	n.self.mu.Unlock()
	if st.err == nil && !st.at.IsZero() && st.class.Allocation == nat.Random {
		return ErrRandomNAT
	}
	return ErrNATUnknown
}

// failCause maps a wire.Fail code to the end it is about and the cause.
// The answering node is the target; the addresses it dialled (reverse)
// are this host's.
func failCause(code string) (End, error) {
	switch code {
	case wire.FailNoHubRoute:
		return Path, ErrNoHubRoute
	case wire.FailNotAttached:
		return Remote, ErrNotAttached
	case wire.FailPortRefused:
		return Remote, direct.ErrRefused
	case wire.FailDisabled:
		return Remote, ErrDisabled
	case wire.FailNoRoute:
		return Remote, ErrNoRoute
	case wire.FailUnreachable:
		return Local, ErrUnreachable
	case wire.FailTimeout:
		return Local, ErrTimeout
	case wire.FailRejected:
		return Local, ErrRejected
	case wire.FailDenied:
		return Remote, pki.ErrDenied
	case wire.FailNATRandom:
		return Remote, ErrRandomNAT
	case wire.FailNATUnknown:
		return Remote, ErrNATUnknown
	}
	return Remote, nil
}

// failCode is the wire.Fail code for a failed connection this node made
// (a reverse setup's call back).
func failCode(err error) string {
	switch {
	case errors.Is(err, pki.ErrDenied), errors.Is(err, pki.ErrWrongPeer):
		return wire.FailDenied
	}
	switch connectCause(err) {
	case ErrNoRoute:
		return wire.FailNoRoute
	case ErrUnreachable:
		return wire.FailUnreachable
	case ErrTimeout:
		return wire.FailTimeout
	case ErrRejected:
		return wire.FailRejected
	}
	return ""
}

// connectCause classifies why this host's connections to some addresses
// failed (a *direct.DialError lists each address tried), as measured here:
// a reset (ErrRejected), no answer (ErrTimeout), an unreachable answer from
// a router (ErrUnreachable), or no route in this host's own routing table
// (ErrNoRoute: the kernel says "unreachable" for both; which it was, a
// routing-table look-up here tells). Of several addresses' causes, the one
// that got furthest counts. nil: none of these.
func connectCause(err error) error {
	var causes []error
	var de *direct.DialError
	if errors.As(err, &de) {
		// a loopback address among a remote machine's (one a hub saw
		// through an ssh tunnel) says nothing of the path to it: count it
		// only if there is nothing else.
		var loop []error
		for _, a := range de.Attempts {
			if ap, err := netip.ParseAddrPort(a.Via); err == nil && ap.Addr().IsLoopback() {
				loop = append(loop, attemptCause(a.Err, a.Via))
				continue
			}
			causes = append(causes, attemptCause(a.Err, a.Via))
		}
		if len(causes) == 0 {
			causes = loop
		}
	} else {
		causes = append(causes, attemptCause(err, ""))
	}
	for _, k := range []error{ErrRejected, ErrTimeout, ErrUnreachable, ErrNoRoute} {
		for _, c := range causes {
			if c == k {
				return k
			}
		}
	}
	return nil
}

func attemptCause(err error, via string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return ErrRejected
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		if ap, perr := netip.ParseAddrPort(via); perr == nil && !routable(ap) {
			return ErrNoRoute
		}
		return ErrUnreachable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return ErrTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ErrTimeout
	}
	return nil
}

// routable reports whether this host's routing table has a route to ap:
// connecting a UDP socket looks the route up and sends nothing.
func routable(ap netip.AddrPort) bool {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(ap))
	if err != nil {
		return false
	}
	c.Close()
	return true
}
