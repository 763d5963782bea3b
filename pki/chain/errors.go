package chain

import (
	"errors"
	"fmt"
	"strings"
)

// What went wrong, for errors.Is on an *Error.
var (
	ErrNoCertificate = errors.New("no certificate")
	ErrMalformed     = errors.New("malformed certificate")
	ErrIncomplete    = errors.New("incomplete chain")
	ErrAlgorithm     = errors.New("unsupported algorithm")
	ErrUnknownCA     = errors.New("not issued by a configured CA")
	ErrSignature     = errors.New("bad signature")
	ErrIssuer        = errors.New("issuer mismatch")
	ErrExpired       = errors.New("expired")
	ErrNotYetValid   = errors.New("not yet valid")
	ErrRevoked       = errors.New("revoked")
	ErrStaleCRL      = errors.New("revocation list out of date")
	ErrKeyUsage      = errors.New("key usage")
	ErrNotProxy      = errors.New("not a proxy certificate")
	ErrSubject       = errors.New("proxy subject")
	ErrLifetime      = errors.New("proxy lifetime")
	ErrPathLength    = errors.New("proxy path length exceeded")
	ErrPolicy        = errors.New("proxy policy")
	// ErrSelfSigned is an ErrUnknownCA of its own kind: a certificate
	// that signed itself, no certificate of any CA's.
	ErrSelfSigned = fmt.Errorf("self-signed, %w", ErrUnknownCA)
)

// Error says exactly what is wrong with a chain and on which certificate.
// Its text is Cert, a colon and Detail: "proxy 2: expired at
// 2026-11-22T12:00:00Z", "end-entity certificate CN=alice,OU=user,O=grid:
// revoked: serial ...".
type Error struct {
	// Index is the certificate's position in the chain as given (0: the
	// leaf), -1 when the error is about no one certificate.
	Index int
	// Cert names the certificate: "proxy N" (proxy 1 is the one the user's
	// certificate signed, the leaf the last), "end-entity certificate
	// SUBJECT", "CA SUBJECT", "certificate N of M" before the chain is
	// sorted out, or "chain".
	Cert   string
	Reason error // one of the Err variables
	Detail string
}

func (e *Error) Error() string { return e.Cert + ": " + e.Detail }

// Unwrap returns the reason, so errors.Is(err, ErrExpired) works.
func (e *Error) Unwrap() error { return e.Reason }

// Kind is what went wrong and on what kind of certificate ("proxy:
// expired", "end-entity certificate: revoked"): a small fixed set, for
// telling failures apart without their words (subjects, serials, times).
func (e *Error) Kind() string {
	role := "chain"
	for _, r := range []string{"proxy", "end-entity certificate", "CA", "certificate"} {
		if strings.HasPrefix(e.Cert, r) {
			role = r
			break
		}
	}
	reason := "unknown"
	if e.Reason != nil {
		reason = e.Reason.Error()
	}
	return role + ": " + reason
}

func fail(index int, cert string, reason error, format string, args ...any) *Error {
	return &Error{Index: index, Cert: cert, Reason: reason, Detail: fmt.Sprintf(format, args...)}
}
