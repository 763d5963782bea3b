// Package ca is the grid's certificate authority: it makes the CA (a
// self-signed certificate for an RSA key, which the Globus tools need;
// Ed25519 and ECDSA CAs made before or elsewhere work too), issues the long-lived
// end-entity certificates of hubs, nodes and users, and signs the
// revocation list. It owns the layout of those certificates, which
// AttributesOf reads back: the subject O=grid, OU=role, CN=name, and the
// groups as URIs gridlink:group:NAME in the subject alternative name.
//
// A hub's or node's certificate certifies its existing identity key, so its
// ID (identity.ID) stays what it was; a user's certifies a key of the user's
// own. Proxy certificates are package proxy's, validating chains package
// chain's, and the CA's key file package keyfile's.
package ca

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// The files of a CA directory, as `gridlink ca init` writes it: the CA's
// certificate, its private key and its revocation list.
const (
	DirCert = "ca.pem"
	DirKey  = "ca.key"
	DirCRL  = "crl.pem"
)

// Validity defaults. Every certificate is backdated by Backdate to tolerate
// clocks that lag the CA's.
const (
	DefaultCALifetime  = 10 * 365 * 24 * time.Hour // the CA certificate
	DefaultLifetime    = 365 * 24 * time.Hour      // hub, node and user certificates
	DefaultCRLLifetime = 30 * 24 * time.Hour       // a revocation list's NextUpdate after its ThisUpdate
	Backdate           = 5 * time.Minute
)

// Authority is a grid CA: its certificate and the key that signs with it.
type Authority struct {
	Cert *x509.Certificate
	key  crypto.Signer
}

// Config says how to make a CA. Only Name is required.
type Config struct {
	// Name is the grid's name: the CA's subject is O=Name, CN=Name CA,
	// and the certificates it issues have O=Name.
	Name string
	// Key signs for the CA; nil makes a new RSA key of CARSABits (Key()
	// returns it for saving): the Globus tools cannot make proxies of
	// certificates an Ed25519 or ECDSA CA signed (grid-proxy-init:
	// "Certificate's signing algorithm not supported by OpenSSL").
	Key crypto.Signer
	// Start is when the CA becomes valid (zero: now); it stays valid for
	// Lifetime (zero: DefaultCALifetime).
	Start    time.Time
	Lifetime time.Duration
}

// New makes a CA with a self-signed certificate.
func New(c Config) (*Authority, error) {
	if err := checkName(c.Name); err != nil {
		return nil, fmt.Errorf("ca: grid name: %w", err)
	}
	key := c.Key
	if key == nil {
		priv, err := rsa.GenerateKey(rand.Reader, CARSABits)
		if err != nil {
			return nil, err
		}
		key = priv
	}
	if err := checkKey(User, key.Public()); err != nil {
		return nil, fmt.Errorf("%w (for the CA's own key)", err)
	}
	start, end := validity(c.Start, c.Lifetime, DefaultCALifetime)
	serial, err := NewSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{c.Name}, CommonName: c.Name + " CA"},
		NotBefore:             start,
		NotAfter:              end,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0, // the CA issues end-entity certificates only
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("ca: self-signed certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Authority{Cert: cert, key: key}, nil
}

// Load makes an Authority of a CA certificate and its key (as read back
// from files), checking that they belong together and that the certificate
// may sign certificates and revocation lists.
func Load(cert *x509.Certificate, key crypto.Signer) (*Authority, error) {
	if cert == nil || key == nil {
		return nil, errors.New("ca: no certificate or no key")
	}
	if err := CheckCA(cert); err != nil {
		return nil, err
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("ca: the key does not belong to the CA certificate")
	}
	return &Authority{Cert: cert, key: key}, nil
}

// CheckCA reports whether cert can serve as a grid CA: a self-issued CA
// certificate whose key may sign certificates and revocation lists.
func CheckCA(cert *x509.Certificate) error {
	switch {
	case !cert.BasicConstraintsValid || !cert.IsCA:
		return fmt.Errorf("ca: %s is not a CA certificate", cert.Subject)
	case cert.KeyUsage&x509.KeyUsageCertSign == 0 || cert.KeyUsage&x509.KeyUsageCRLSign == 0:
		return fmt.Errorf("ca: %s may not sign certificates and revocation lists (key usage)", cert.Subject)
	case string(cert.RawSubject) != string(cert.RawIssuer):
		return fmt.Errorf("ca: %s is not self-issued: grid CAs are roots", cert.Subject)
	}
	return nil
}

// Key is the CA's private key, for saving (keyfile.Encrypt).
func (a *Authority) Key() crypto.Signer { return a.key }

// Name is the grid's name (the CA's O).
func (a *Authority) Name() string {
	if o := a.Cert.Subject.Organization; len(o) > 0 {
		return o[0]
	}
	return a.Cert.Subject.CommonName
}

// NewSerial returns a random positive serial number of at most 128 bits,
// unique without keeping state.
func NewSerial() (*big.Int, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	b[0] &= 0x7f
	b[0] |= 0x40 // never short: serials print with the same width
	return new(big.Int).SetBytes(b), nil
}

// validity is the NotBefore and NotAfter of a certificate valid for
// lifetime (zero: def) from start (zero: now), backdated by Backdate.
func validity(start time.Time, lifetime, def time.Duration) (time.Time, time.Time) {
	if start.IsZero() {
		start = time.Now()
	}
	if lifetime <= 0 {
		lifetime = def
	}
	start = start.UTC().Truncate(time.Second)
	return start.Add(-Backdate), start.Add(lifetime)
}
