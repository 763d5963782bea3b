package xfer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gridlink/gridlink/pki/proxy"
)

// Delegation is the source's side of the authorization step of a push:
// before the source dials the target on the caller's behalf, it may ask
// the caller for a credential and dial with it.
type Delegation interface {
	// Begin starts the step for a push to target. It returns what the
	// source asks of the caller (nil: nothing) and the function that
	// checks the caller's answer and returns the credential Config.Push
	// dials with (nil: the service's own identity).
	Begin(target string) (ask []byte, accept func(answer []byte) (*proxy.Credential, error), err error)
}

// ProxyDelegation is the Delegation of a grid with a CA. For each push the
// source makes a fresh key and sends a signing request for it (pki/proxy's
// GLDQ); the caller answers with a proxy certificate for that key, signed
// by the caller's own credential (GLDA), and the source dials the target
// as the caller. No private key travels, and the proxy is only ever held
// in the source's memory for the push.
type ProxyDelegation struct {
	// Lifetime is how long a delegated proxy is asked to live; zero leaves
	// it to the caller (DelegateProxy: proxy.DefaultDelegatedLifetime).
	Lifetime time.Duration
}

// Begin makes the key and the request.
func (d ProxyDelegation) Begin(target string) ([]byte, func([]byte) (*proxy.Credential, error), error) {
	p, req, err := proxy.NewRequest(d.Lifetime, nil)
	if err != nil {
		return nil, nil, err
	}
	return req, func(answer []byte) (*proxy.Credential, error) {
		if len(answer) == 0 {
			return nil, errors.New("the caller sent no proxy (it runs without a grid credential)")
		}
		return p.Accept(answer)
	}, nil
}

// DelegateProxy returns an Options.Delegate that answers a source's
// signing request with a proxy signed by cred: restricted to services
// (nil: no restriction beyond cred's own and what the source asks for),
// living lifetime (zero: proxy.DefaultDelegatedLifetime) or less, never
// past cred. A source that asks nothing gets nothing: it pushes with its
// own identity.
func DelegateProxy(cred *proxy.Credential, services []string, lifetime time.Duration) func(ctx context.Context, target string, request []byte) ([]byte, error) {
	return func(ctx context.Context, target string, request []byte) ([]byte, error) {
		if len(request) == 0 {
			return nil, nil
		}
		req, err := proxy.ParseRequest(request)
		if err != nil {
			return nil, err
		}
		answer, err := proxy.Delegate(cred, req, proxy.Options{Lifetime: lifetime, Restrict: services})
		if err != nil {
			return nil, fmt.Errorf("signing a proxy for the push to %s: %w", target, err)
		}
		return answer, nil
	}
}
