package gridlink

// One-shot nodes' identities (issue 33). A hub admits one live process
// per identity (hubserver/oneid.go), and a node started with a user's
// proxy file has the proxy's key for its identity: so her agent and a
// command of hers (cp, a dashboard transfer, perf), or two commands, with
// one proxy would have one identity, and all but the first would be
// refused. A node started for a command's lifetime (StartAttached) with
// a proxy file signs instead, in memory, a proxy of that proxy for a
// fresh key of its own (RFC 3820 lets a proxy sign one) and attaches with
// it: its node ID is its own. Peers still see the user: the chain ends at
// her certificate, whose subject is what exec's grid-mapfile, a transfer
// service's --allow and the dashboard's members judge.
//
// The child proxy narrows only: the parent's restriction (or its
// independence), a path length of 0 (it signs nothing), valid within the
// parent's period (to the parent's end, so the command reconnects as long
// as the parent would have let it); it is never written anywhere and dies
// with the process. A node key (--key), or a proxy whose path length
// allows no proxy below it, gives no identity of its own: the node has
// the one it was given, and a hub's refusal then says why
// (SharedIdentityError).

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/proxy"
)

// SharedIdentityError is why a one-shot node has the identity it was
// given, which one process at a time may hold, rather than one of its
// own: its node key, or a proxy it could not sign a proxy with (Err,
// proxy.ErrNoProxyLeft for its path length). StartAttached adds it to a
// hub's refusal of the node (ErrIdentityAttached).
type SharedIdentityError struct {
	Key   string // the node's key file ("" for Config.Key) when it has no proxy
	Open  bool   // the key's grid is open (no CA): a fresh key would do
	Proxy string // the proxy file it could not sign a proxy with
	Err   error
}

func (e *SharedIdentityError) Error() string {
	switch {
	case e.Proxy != "" && errors.Is(e.Err, proxy.ErrNoProxyLeft):
		return fmt.Sprintf("this command's node could not have an identity of its own: its proxy %s may sign no proxy (a path length constraint of 0), so it has that proxy's own identity: stop the other process, or make a proxy without that limit for this command (gridlink proxy init --out FILE, then --proxy FILE)", e.Proxy)
	case e.Proxy != "":
		return fmt.Sprintf("this command's node could not have an identity of its own (a proxy of its proxy %s: %v), so it has that proxy's identity: stop the other process, or give this command another proxy (gridlink proxy init --out FILE, then --proxy FILE)", e.Proxy, e.Err)
	}
	key := "the node key given"
	if e.Key != "" {
		key = "the node key " + e.Key
	}
	if e.Open {
		return fmt.Sprintf("%s is one identity, which one process at a time may hold: stop the other process, or run this command without it (no --key: a fresh key, an identity of its own)", key)
	}
	return fmt.Sprintf("%s is one identity, which one process at a time may hold, and it signs no other: stop the other process, or run this command with a proxy instead (--proxy FILE), which gives its node an identity of its own", key)
}

func (e *SharedIdentityError) Unwrap() error { return e.Err }

// ownIdentity is c for a one-shot node: with a proxy file, c with the
// credentials of a child proxy of it (an identity of its own); else c.
// shared is why the node has c's identity instead, which another process
// may hold (nil: it has its own, or a fresh key); err is why c's
// credentials cannot be used at all (Credentials.Load's errors).
func (c Config) ownIdentity() (own Config, shared *SharedIdentityError, err error) {
	switch {
	case c.creds != nil:
		// made already: a push's transient node, whose delegated proxy
		// has a fresh key of its own
		return c, nil, nil
	case c.Credentials.Proxy == "" || c.Credentials.unchecked:
		if c.Key.IsZero() && c.KeyFile == "" {
			return c, nil, nil // a fresh key
		}
		return c, &SharedIdentityError{Key: c.KeyFile, Open: c.Credentials.CA == ""}, nil
	}
	parent, _, err := c.Credentials.Load(Key{}) // the proxy's key: Key is not used
	if err != nil {
		return c, nil, err
	}
	c.creds = parent
	child, err := childProxy(parent)
	if err != nil {
		return c, &SharedIdentityError{Proxy: c.Credentials.Proxy, Err: err}, nil
	}
	c.creds = child
	return c, nil, nil
}

// childProxy makes the credentials of a proxy of parent (a proxy's
// credentials, its chain checked) for a fresh identity key: restricted
// as parent is (or independent as it is), signing nothing (path length
// 0), valid until parent's end.
func childProxy(parent *pki.Credentials) (*pki.Credentials, error) {
	self, err := parent.Self()
	if err != nil {
		return nil, err
	}
	var chain []*x509.Certificate
	for _, der := range parent.Certificate().Certificate {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		chain = append(chain, cert)
	}
	issuer := &proxy.Credential{Chain: chain, Key: parent.Key.Private()}
	key, err := identity.NewKey()
	if err != nil {
		return nil, err
	}
	o := proxy.Options{
		// to the parent's end (Issue cuts it there); the period stays
		// within the parent's, so whoever admits the parent's lifetime
		// admits this one's
		Lifetime:    time.Until(chain[0].NotAfter) + time.Second,
		MaxLifetime: -1,
		LimitPath:   true,
		PathLen:     0,
		Independent: self.Chain != nil && self.Chain.Independent,
	}
	cert, err := proxy.Issue(issuer, key.Private().Public(), o)
	if err != nil {
		return nil, err
	}
	return pki.Certified(key, append([]*x509.Certificate{cert}, chain...), parent.Trust())
}
