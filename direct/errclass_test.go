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
	"github.com/gridlink/gridlink/pki/chain"
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

// A refusal's log kind is its fault's kind and what it is on, never its
// words: two certificates revoked are one kind, whatever their subjects
// and serials; an expired proxy, an expired end-entity certificate and a
// self-signed one are three others (each keeps its own log budget, so a
// flood of one reason does not hide the rest: vconn.TestOutsidersRefused).
func TestRefusalKind(t *testing.T) {
	revokedA := &pki.DeniedError{Peer: "a", Reason: "x", Cause: &chain.Error{Cert: "end-entity certificate CN=a", Reason: chain.ErrRevoked, Detail: "revoked: serial 1"}}
	revokedB := fmt.Errorf("wrapped: %w", &chain.Error{Cert: "end-entity certificate CN=b", Reason: chain.ErrRevoked, Detail: "revoked: serial 2"})
	if RefusalKind(revokedA) != RefusalKind(revokedB) {
		t.Errorf("two revoked certificates: kinds %q and %q, want one", RefusalKind(revokedA), RefusalKind(revokedB))
	}
	kinds := map[QuietKind]string{}
	for name, err := range map[string]error{
		"revoked":        revokedA,
		"proxy expired":  &chain.Error{Cert: "proxy 1", Reason: chain.ErrExpired},
		"cert expired":   &chain.Error{Cert: "end-entity certificate CN=e", Reason: chain.ErrExpired},
		"self-signed":    &chain.Error{Cert: "end-entity certificate CN=s", Reason: chain.ErrSelfSigned},
		"another CA":     &chain.Error{Cert: "end-entity certificate CN=i", Reason: chain.ErrUnknownCA},
		"no certificate": errors.New("something else"),
	} {
		k := RefusalKind(err)
		if other, ok := kinds[k]; ok {
			t.Errorf("%s and %s: one kind %q", name, other, k)
		}
		kinds[k] = name
	}
	if !errors.Is(&chain.Error{Reason: chain.ErrSelfSigned}, chain.ErrUnknownCA) {
		t.Error("a self-signed certificate is no longer ErrUnknownCA")
	}
}
