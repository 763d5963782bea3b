// Package chain validates the certificate chains peers present: ordinary
// X.509 path validation of an end-entity certificate (a hub's, node's or
// user's) to the configured grid CAs (or a user's, named by its Globus
// DN, to a CA of the federation: Config.UserCAs; RSA and ECDSA as grid
// certificates are, Ed25519 as gridlink's nodes are), the revocation lists those CAs
// signed, and on top the RFC 3820 §4 rules for the proxy certificates
// below a user's certificate, which Go's crypto/x509 refuses to handle.
// It says who a chain proves (Result: the user, hub or node, its groups,
// any restriction) or exactly what is wrong with it (*Error).
//
// Deciding what that identity may do (admission, access control), and
// fetching revocation lists, are its callers'. Certificates are made by
// packages ca and proxy.
package chain

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/proxy"
)

// Defaults of Config.
const (
	DefaultMaxProxies       = 8
	DefaultMaxProxyLifetime = proxy.DefaultMaxLifetime // 7 days
)

// Config says what to trust. Only Roots is required.
type Config struct {
	// Roots are the grid CAs (usually one; two while the CA is renewed).
	Roots []*x509.Certificate
	// UserCAs are the CAs of a federation (a grid host's trust directory,
	// X509_CERT_DIR): the end-entity certificates they issue are users'
	// only, named by their subject (ca.ForeignAttributes), never hubs' or
	// nodes', whatever their OU says, and with no gridlink groups. One
	// that is also among Roots counts as a root.
	UserCAs []*x509.Certificate
	// CRLs are revocation lists, each signed by one of Roots or UserCAs; the highest
	// numbered one of each CA applies. A CA without one revokes nothing.
	CRLs []*x509.RevocationList
	// AllowStaleCRL accepts chains while a CA's revocation list is past
	// its NextUpdate; by default they are refused (ErrStaleCRL), since
	// revocations made since are unknown.
	AllowStaleCRL bool
	// MaxProxies bounds the proxies in a chain (zero: DefaultMaxProxies).
	MaxProxies int
	// MaxProxyLifetime bounds a proxy's NotAfter-NotBefore (zero:
	// DefaultMaxProxyLifetime; negative: no bound).
	MaxProxyLifetime time.Duration
	// AllowIndependent accepts id-ppl-independent proxies (Result.
	// Independent says one was seen); by default they are refused.
	AllowIndependent bool
}

// Verifier validates chains; it is immutable and safe for concurrent use.
// To take a new revocation list, make a new one.
type Verifier struct {
	cfg   Config
	roots []*root
}

type root struct {
	user    bool // one of Config.UserCAs: certifies users only
	cert    *x509.Certificate
	pool    *x509.CertPool
	crl     *x509.RevocationList
	revoked map[string]time.Time // serial (decimal) → revocation time
}

// New checks the configuration: every root a grid CA (ca.CheckCA), every
// user CA a CA (ca.CheckIssuer), every revocation list signed by one of
// them.
func New(c Config) (*Verifier, error) {
	if len(c.Roots) == 0 && len(c.UserCAs) == 0 {
		return nil, errors.New("chain: no CA configured")
	}
	if c.MaxProxies <= 0 {
		c.MaxProxies = DefaultMaxProxies
	}
	if c.MaxProxyLifetime == 0 {
		c.MaxProxyLifetime = DefaultMaxProxyLifetime
	}
	v := &Verifier{cfg: c}
	for _, r := range c.Roots {
		if r == nil {
			return nil, errors.New("chain: nil CA certificate")
		}
		if err := ca.CheckCA(r); err != nil {
			return nil, fmt.Errorf("chain: %w", err)
		}
		if err := r.CheckSignatureFrom(r); err != nil {
			return nil, fmt.Errorf("chain: CA %s: bad self-signature: %w", r.Subject, err)
		}
		v.add(r, false)
	}
	for _, r := range c.UserCAs {
		if r == nil {
			return nil, errors.New("chain: nil CA certificate")
		}
		if v.isRoot(r) {
			continue
		}
		if err := ca.CheckIssuer(r); err != nil {
			return nil, fmt.Errorf("chain: %w", err)
		}
		v.add(r, true)
	}
	for i, l := range c.CRLs {
		var signer *root
		for _, r := range v.roots {
			if bytes.Equal(l.RawIssuer, r.cert.RawSubject) && l.CheckSignatureFrom(r.cert) == nil {
				signer = r
				break
			}
		}
		if signer == nil {
			return nil, fmt.Errorf("chain: revocation list %d (issuer %s) is not signed by a configured CA", i+1, l.Issuer)
		}
		if signer.crl != nil && l.Number != nil && signer.crl.Number != nil && l.Number.Cmp(signer.crl.Number) <= 0 {
			continue
		}
		signer.crl = l
		signer.revoked = map[string]time.Time{}
		for _, e := range l.RevokedCertificateEntries {
			signer.revoked[e.SerialNumber.String()] = e.RevocationTime
		}
	}
	return v, nil
}

func (v *Verifier) add(c *x509.Certificate, user bool) {
	pool := x509.NewCertPool()
	pool.AddCert(c)
	v.roots = append(v.roots, &root{user: user, cert: c, pool: pool})
}

// Result is what a valid chain proves.
type Result struct {
	// Attributes are the end entity's name, role and groups: the identity
	// the chain proves (for a proxy chain, the user's).
	ca.Attributes
	EndEntity *x509.Certificate // the hub's, node's or user's certificate
	CA        *x509.Certificate // the configured CA that issued it
	Leaf      *x509.Certificate // the certificate whose key the peer holds
	Proxies   int               // proxies between EndEntity and Leaf (0: Leaf is EndEntity)
	// Restriction lists the services the chain may be used for (the
	// innermost restricted proxy's entries: SERVICE, any node, or
	// SERVICE@NODEID, at that node only; see package proxy); nil means
	// unrestricted.
	Restriction []string
	// Independent says a proxy in the chain is id-ppl-independent: the
	// chain carries none of the user's rights (only if Config allows it).
	Independent bool
	// NotAfter is when the first certificate of the chain expires.
	NotAfter time.Time
}

// Subject is the end entity's subject, e.g. CN=alice,OU=user,O=grid.
func (r *Result) Subject() string { return r.EndEntity.Subject.String() }

// Allows reports whether the chain may be used towards service at the
// node whose identity key is node: unrestricted, or an entry of its
// restriction names the service and no node or that node.
func (r *Result) Allows(service string, node identity.ID) bool {
	return proxy.Permits(r.Restriction, service, node)
}

// NodeID is the ID of a hub's or node's certificate: its identity key. It
// is an error for a user's chain.
func (r *Result) NodeID() (identity.ID, error) {
	if r.Role != ca.Hub && r.Role != ca.Node {
		return identity.ID{}, fmt.Errorf("chain: %s is a %s, which has no node ID", r.Subject(), r.Role)
	}
	pub, ok := r.EndEntity.PublicKey.(ed25519.PublicKey)
	if !ok {
		return identity.ID{}, fmt.Errorf("chain: %s has a %T key", r.Subject(), r.EndEntity.PublicKey)
	}
	return identity.IDFromPublicKey(pub)
}

// Verify parses and validates a chain as TLS delivers it (leaf first) at
// time at (zero: now).
func (v *Verifier) Verify(raw [][]byte, at time.Time) (*Result, error) {
	if len(raw) == 0 {
		return nil, fail(-1, "chain", ErrNoCertificate, "no certificate")
	}
	if len(raw) > v.cfg.MaxProxies+2 {
		return nil, fail(-1, "chain", ErrMalformed, "%d certificates, more than a CA, an end-entity certificate and %d proxies", len(raw), v.cfg.MaxProxies)
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, der := range raw {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fail(i, fmt.Sprintf("certificate %d of %d", i+1, len(raw)), ErrMalformed, "%v", err)
		}
		certs[i] = c
	}
	return v.VerifyCertificates(certs, at)
}
