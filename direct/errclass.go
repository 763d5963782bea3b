package direct

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/chain"
)

// ErrorClass names the kind of a failure, decided with errors.Is and
// errors.As, never from its text: for callers that log a retried failure
// again only when its kind changes. A failure of several (an Unwrap()
// []error, e.g. a hub.RoundError) is the sorted classes of its parts;
// one of no known kind is named by the type of its innermost error.
func ErrorClass(err error) string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var parts []string
		for _, e := range j.Unwrap() {
			parts = append(parts, ErrorClass(e))
		}
		slices.Sort(parts)
		return strings.Join(parts, "; ")
	}
	var ne net.Error
	var dns *net.DNSError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrRefused):
		return "refused"
	case errors.Is(err, pki.ErrDenied):
		return "denied"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ENETUNREACH):
		return "network unreachable"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "host unreachable"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "closed"
	case errors.As(err, &dns):
		return "name lookup failed"
	}
	for next := errors.Unwrap(err); next != nil; next = errors.Unwrap(err) {
		err = next
	}
	return fmt.Sprintf("%T", err)
}

// RefusalKind is the Quiet kind of a refusal's log line: its reason's
// kind, never its words (a chain's fault and on what: a proxy expired, an
// end-entity certificate revoked, of another CA, self-signed, ...; else
// ErrorClass), so a flood of one reason neither hides the others nor
// makes a new kind per peer.
func RefusalKind(err error) QuietKind {
	var de *pki.DeniedError
	if errors.As(err, &de) && de.Cause != nil {
		err = de.Cause
	}
	var ce *chain.Error
	if errors.As(err, &ce) {
		return QuietKind("refusals: " + ce.Kind())
	}
	return QuietKind("refusals: " + ErrorClass(err))
}
