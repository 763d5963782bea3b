package pki

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// ErrNewKey is wrapped when a renewed chain certifies another key than
// the credentials': a node's identity is its key, so taking the chain
// would make it another node (restart it to become that one).
var ErrNewKey = errors.New("the new certificate is for another key")

// Renew makes chain (leaf first, as Certified takes it) what handshakes
// present from now on: a renewed proxy or certificate for the same key.
// The chain must certify the credentials' key and satisfy their Trust,
// as Certified checks; else nothing changes. Connections already up keep
// the chain they were set up with.
func (c *Credentials) Renew(chain []*x509.Certificate) error {
	if len(chain) == 0 {
		return errors.New("pki: no certificate")
	}
	if c.trust == nil {
		return errors.New("pki: an open grid's credentials have no chain to renew")
	}
	if pub, ok := chain[0].PublicKey.(ed25519.PublicKey); !ok || !pub.Equal(c.Key.Private().Public()) {
		return fmt.Errorf("pki: %w: %s is not for this node's key (ID %s)", ErrNewKey, chain[0].Subject, c.Key.ID().Short())
	}
	if _, err := c.trust.VerifyCertificates(chain); err != nil {
		return fmt.Errorf("pki: renewed certificate: %w", err)
	}
	raw := make([][]byte, len(chain))
	for i, cert := range chain {
		raw[i] = cert.Raw
	}
	c.cert.Store(&tls.Certificate{Certificate: raw, PrivateKey: c.Key.Private(), Leaf: chain[0]})
	return nil
}

// Chain is the chain the credentials present now, leaf first (one
// self-signed certificate in an open grid).
func (c *Credentials) Chain() []*x509.Certificate {
	cert := c.cert.Load()
	out := make([]*x509.Certificate, 0, len(cert.Certificate))
	for _, der := range cert.Certificate {
		if x, err := x509.ParseCertificate(der); err == nil {
			out = append(out, x)
		}
	}
	return out
}

// Lifetime is when the chain presented now became valid (its leaf's
// NotBefore) and when it stops being (the earliest NotAfter in it).
func Lifetime(chain []*x509.Certificate) (notBefore, notAfter time.Time) {
	for i, c := range chain {
		if i == 0 {
			notBefore, notAfter = c.NotBefore, c.NotAfter
		}
		if c.NotAfter.Before(notAfter) {
			notAfter = c.NotAfter
		}
	}
	return notBefore, notAfter
}
