// Package proxy makes RFC 3820 proxy certificates: short-lived certificates
// that a user's certificate (or a proxy) signs for a new key, so the user's
// passphrase-protected key is unlocked once per proxy lifetime (single
// sign-on), and that can be delegated to a remote service by a signing
// request, so no private key ever travels (Delegate, NewRequest).
//
// It owns the ProxyCertInfo extension (info.go) and gridlink's restriction
// policy, whose entries name a service at any node or at one node
// (SERVICE@NODEID) and only narrow down a chain (restrict.go), issuing
// proxies (lifetimes positive and at most DefaultMaxLifetime unless told
// otherwise), the proxy credential file (file.go) and the delegation
// request and answer formats (delegation.go). The CA and the
// users' certificates are package ca's; validating a chain is package
// chain's, which callers must use on any credential they did not make.
package proxy

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	encasn1 "encoding/asn1"
	"errors"
	"fmt"
	"time"

	"github.com/gridlink/gridlink/pki/ca"
	"golang.org/x/crypto/cryptobyte"
	"golang.org/x/crypto/cryptobyte/asn1"
)

// Lifetime defaults. A proxy never outlives its issuer: its NotAfter is cut
// to the issuer's.
const (
	DefaultLifetime          = 12 * time.Hour     // a proxy made by New (proxy init)
	DefaultDelegatedLifetime = 2 * time.Hour      // a proxy made by Delegate
	DefaultMaxLifetime       = 7 * 24 * time.Hour // the longest proxy Issue makes unless Options.MaxLifetime says otherwise
)

// Credential is a certificate chain with the private key of its first
// certificate: a user's certificate and key, or a proxy.
type Credential struct {
	// Chain is leaf first: the credential's own certificate, then the
	// certificates that issued it, up to and including the user's
	// end-entity certificate (not the CA's).
	Chain []*x509.Certificate
	Key   crypto.Signer
}

// Leaf is the credential's own certificate.
func (c *Credential) Leaf() *x509.Certificate { return c.Chain[0] }

// Certificate is the credential for a TLS configuration: the chain as TLS
// sends it, leaf first.
func (c *Credential) Certificate() tls.Certificate {
	t := tls.Certificate{PrivateKey: c.Key, Leaf: c.Chain[0]}
	for _, cert := range c.Chain {
		t.Certificate = append(t.Certificate, cert.Raw)
	}
	return t
}

// check reports whether c is usable: a chain whose leaf certifies the key.
func (c *Credential) check() error {
	if c == nil || len(c.Chain) == 0 || c.Key == nil {
		return errors.New("proxy: empty credential")
	}
	pub, ok := c.Key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(c.Chain[0].PublicKey) {
		return errors.New("proxy: the key does not belong to the credential's certificate")
	}
	return nil
}

// Options say what proxy to make. The zero value makes an inheritAll proxy
// with no path limit, valid for DefaultLifetime from now (or to the
// issuer's end, if sooner), restricted as its issuer is if it is.
type Options struct {
	Start    time.Time     // zero: now
	Lifetime time.Duration // zero: DefaultLifetime (Delegate: DefaultDelegatedLifetime); negative: refused
	// MaxLifetime is the longest Lifetime accepted (zero:
	// DefaultMaxLifetime; negative: no bound). Verifiers refuse proxies
	// longer than theirs (pki/chain's MaxProxyLifetime, also 7 days by
	// default), so a longer one is refused here rather than there.
	MaxLifetime time.Duration
	// LimitPath writes a pCPathLenConstraint of PathLen: at most PathLen
	// proxies may follow this one (0: it may sign none).
	LimitPath bool
	PathLen   int
	// Restrict limits the proxy to these services; it must be within the
	// issuer's restriction. Nil means the issuer's restriction, or none.
	Restrict []string
	// Independent makes an id-ppl-independent proxy, carrying none of the
	// user's rights (verifiers refuse it unless told otherwise).
	Independent bool
}

// New makes a proxy of issuer: a new key of the issuer's kind (Ed25519;
// ECDSA on its curve; RSA of its size, as grid-proxy-init makes them,
// since Globus sizes the RSA keys of proxies it delegates by their
// issuer's) and a certificate for it.
func New(issuer *Credential, o Options) (*Credential, error) {
	if err := issuer.check(); err != nil {
		return nil, err
	}
	var priv crypto.Signer
	var err error
	switch k := issuer.Key.Public().(type) {
	case *rsa.PublicKey:
		priv, err = rsa.GenerateKey(rand.Reader, max(k.N.BitLen(), ca.MinRSABits))
	case *ecdsa.PublicKey:
		priv, err = ecdsa.GenerateKey(k.Curve, rand.Reader)
	default:
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	}
	if err != nil {
		return nil, err
	}
	return NewWithKey(issuer, priv, o)
}

// NewWithKey makes a proxy of issuer for priv.
func NewWithKey(issuer *Credential, priv crypto.Signer, o Options) (*Credential, error) {
	cert, err := Issue(issuer, priv.Public(), o)
	if err != nil {
		return nil, err
	}
	return &Credential{Chain: append([]*x509.Certificate{cert}, issuer.Chain...), Key: priv}, nil
}

// Issue signs, with issuer's key, a proxy certificate for pub: subject the
// issuer's plus CN=serial, issuer the issuer's subject, key usage
// digitalSignature, a critical ProxyCertInfo, no basic constraints and no
// alternative names. The issuer must be a user certificate or a proxy.
func Issue(issuer *Credential, pub crypto.PublicKey, o Options) (*x509.Certificate, error) {
	if err := issuer.check(); err != nil {
		return nil, err
	}
	if err := checkPublicKey(pub); err != nil {
		return nil, err
	}
	parent := issuer.Leaf()
	eff, err := effective(issuer.Chain)
	if err != nil {
		return nil, err
	}
	if eff.left == 0 {
		return nil, ErrNoProxyLeft
	}
	info := Info{HasPathLen: o.LimitPath, PathLen: o.PathLen}
	switch {
	case o.Independent && o.Restrict != nil:
		return nil, errors.New("proxy: an independent proxy cannot be restricted")
	case o.Independent && eff.restrict != nil:
		return nil, errors.New("proxy: the issuer is restricted, so its proxies must be too (not independent)")
	case o.Independent:
		info.Policy = Independent
	case o.Restrict != nil:
		svc, err := normServices(o.Restrict)
		if err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		if eff.restrict != nil && !Subset(svc, eff.restrict) {
			return nil, fmt.Errorf("proxy: restriction %v is wider than the issuer's %v", svc, eff.restrict)
		}
		info.Policy, info.Services = Restricted, svc
	case eff.restrict != nil:
		info.Policy, info.Services = Restricted, eff.restrict
	}
	ext, err := info.Extension()
	if err != nil {
		return nil, err
	}
	start := o.Start
	if start.IsZero() {
		start = time.Now()
	}
	start = start.UTC().Truncate(time.Second)
	life, err := lifetime(o)
	if err != nil {
		return nil, err
	}
	notBefore, notAfter := start.Add(-ca.Backdate), start.Add(life)
	if max := maxLifetime(o); max > 0 && notAfter.Sub(notBefore) > max {
		notBefore = notAfter.Add(-max) // backdated less, so the period stays within max
	}
	if notBefore.Before(parent.NotBefore) {
		notBefore = parent.NotBefore
	}
	if notAfter.After(parent.NotAfter) {
		notAfter = parent.NotAfter
	}
	if !notAfter.After(start) {
		return nil, fmt.Errorf("proxy: the issuer expired at %s", parent.NotAfter.UTC().Format(time.RFC3339))
	}
	serial, err := ca.NewSerial()
	if err != nil {
		return nil, err
	}
	subject, err := extendSubject(parent.RawSubject, serial.String())
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:    serial,
		RawSubject:      subject,
		NotBefore:       notBefore,
		NotAfter:        notAfter,
		KeyUsage:        x509.KeyUsageDigitalSignature,
		ExtraExtensions: []pkix.Extension{ext},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, issuer.Key)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	return x509.ParseCertificate(der)
}

// lifetime is the lifetime o asks for, or why it cannot be had.
func lifetime(o Options) (time.Duration, error) {
	life := o.Lifetime
	switch max := maxLifetime(o); {
	case life < 0:
		return 0, fmt.Errorf("proxy: lifetime %v: want a positive lifetime", life)
	case life == 0:
		life = DefaultLifetime
		if max > 0 && life > max {
			life = max
		}
	case max > 0 && life > max:
		return 0, &LifetimeError{Asked: life, Max: max}
	}
	return life, nil
}

func maxLifetime(o Options) time.Duration {
	if o.MaxLifetime == 0 {
		return DefaultMaxLifetime
	}
	return o.MaxLifetime
}

// ErrNoProxyLeft is Issue's refusal of an issuer whose chain allows no
// further proxy (a pCPathLenConstraint above it: RFC 3820 §3.8).
var ErrNoProxyLeft = errors.New("proxy: the issuer may not sign proxies (its path length constraint)")

// LifetimeError is a proxy lifetime beyond the maximum.
type LifetimeError struct{ Asked, Max time.Duration }

func (e *LifetimeError) Error() string {
	return fmt.Sprintf("proxy: lifetime %v exceeds the maximum of %v a proxy may live (verifiers refuse longer ones)", e.Asked, e.Max)
}

// effect is what an issuer's chain allows its next proxy.
type effect struct {
	left     int      // proxies that may still follow (-1: no limit)
	restrict []string // nil: unrestricted
}

// effective walks an issuer's own chain (trusted: it is the caller's) from
// the end-entity certificate down and says what it allows.
func effective(chain []*x509.Certificate) (effect, error) {
	e := effect{left: -1}
	eec := chain[len(chain)-1]
	if _, isProxy, _ := Of(eec); isProxy {
		return e, errors.New("proxy: the issuer's chain does not end at its user's certificate")
	}
	// A certificate without a gridlink role is another CA's: a user's
	// (ca.ForeignAttributes), which only a verifier given that CA accepts.
	attrs, err := ca.AttributesOf(eec)
	if err != nil && len(eec.Subject.OrganizationalUnit) == 1 && ca.Role(eec.Subject.OrganizationalUnit[0]).Valid() {
		return e, fmt.Errorf("proxy: issuer: %w", err)
	}
	if err == nil && attrs.Role != ca.User {
		return e, fmt.Errorf("proxy: only users sign proxies, and %s is a %s", attrs.Name, attrs.Role)
	}
	for i := len(chain) - 2; i >= 0; i-- {
		info, isProxy, err := Of(chain[i])
		if err != nil {
			return e, err
		}
		if !isProxy && Legacy(chain[i].RawSubject, chain[i+1].RawSubject) {
			return e, errors.New("proxy: the issuer is a legacy Globus proxy (CN=proxy, before RFC 3820): make an RFC 3820 proxy (grid-proxy-init -rfc, the default of Globus 6)")
		}
		if !isProxy {
			return e, errors.New("proxy: the issuer's chain holds a certificate that is not a proxy below its user's")
		}
		if e.left > 0 {
			e.left--
		}
		if info.HasPathLen && (e.left < 0 || info.PathLen < e.left) {
			e.left = info.PathLen
		}
		if info.Policy == Restricted {
			e.restrict = info.Services
		}
	}
	return e, nil
}

var oidCommonName = encasn1.ObjectIdentifier{2, 5, 4, 3}

// ExtendsSubject reports whether the DER Name child is the DER Name issuer
// plus one RDN holding a single CN (RFC 3820 §3.4), comparing the issuer's
// part byte for byte.
func ExtendsSubject(child, issuer []byte) bool {
	_, ok := addedCN(child, issuer)
	return ok
}

// Legacy reports whether the DER Name child is the issuer's plus
// CN=proxy or CN=limited proxy: the subject of a legacy (pre-RFC 3820)
// Globus proxy, which has no ProxyCertInfo.
func Legacy(child, issuer []byte) bool {
	cn, ok := addedCN(child, issuer)
	return ok && (cn == "proxy" || cn == "limited proxy")
}

// addedCN is the value of the one CN the DER Name child adds to issuer,
// and whether it adds exactly that.
func addedCN(child, issuer []byte) (string, bool) {
	c, p := cryptobyte.String(child), cryptobyte.String(issuer)
	var crdns, prdns cryptobyte.String
	if !c.ReadASN1(&crdns, asn1.SEQUENCE) || !c.Empty() || !p.ReadASN1(&prdns, asn1.SEQUENCE) || !p.Empty() {
		return "", false
	}
	if !bytes.HasPrefix(crdns, prdns) {
		return "", false
	}
	last := crdns[len(prdns):]
	var set, atv, val cryptobyte.String
	var oid encasn1.ObjectIdentifier
	var tag asn1.Tag
	if !last.ReadASN1(&set, asn1.SET) || !last.Empty() ||
		!set.ReadASN1(&atv, asn1.SEQUENCE) || !set.Empty() ||
		!atv.ReadASN1ObjectIdentifier(&oid) || !oid.Equal(oidCommonName) ||
		!atv.ReadAnyASN1(&val, &tag) || !atv.Empty() {
		return "", false
	}
	return string(val), (tag == asn1.UTF8String || tag == asn1.PrintableString) && len(val) > 0
}

// extendSubject appends the RDN CN=cn to a DER Name (RFC 3820 §3.4).
func extendSubject(raw []byte, cn string) ([]byte, error) {
	in := cryptobyte.String(raw)
	var rdns cryptobyte.String
	if !in.ReadASN1(&rdns, asn1.SEQUENCE) || !in.Empty() {
		return nil, errors.New("proxy: the issuer's subject does not decode")
	}
	var b cryptobyte.Builder
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddBytes(rdns)
		b.AddASN1(asn1.SET, func(b *cryptobyte.Builder) {
			b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
				b.AddASN1ObjectIdentifier(oidCommonName)
				b.AddASN1(asn1.UTF8String, func(b *cryptobyte.Builder) { b.AddBytes([]byte(cn)) })
			})
		})
	})
	return b.Bytes()
}

func checkPublicKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case ed25519.PublicKey:
		if len(k) == ed25519.PublicKeySize {
			return nil
		}
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() || k.Curve == elliptic.P384() {
			return nil
		}
	case *rsa.PublicKey:
		if k.N.BitLen() >= ca.MinRSABits {
			return nil
		}
	}
	return fmt.Errorf("proxy: cannot certify a %T key: want Ed25519, ECDSA P-256/P-384 or RSA of %d bits or more", pub, ca.MinRSABits)
}
