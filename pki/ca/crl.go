package ca

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// CRLUpdate says how to change the revocation list.
type CRLUpdate struct {
	// Revoke lists the serial numbers to add (already listed ones are
	// kept once).
	Revoke []*big.Int
	// Reason is the RFC 5280 reason code of the new entries (0:
	// unspecified, 1: key compromise, ...).
	Reason int
	// Now is the list's ThisUpdate and the new entries' revocation time
	// (zero: now); the list is current until Now+Lifetime (zero:
	// DefaultCRLLifetime). Verifiers refuse credentials once the list they
	// hold is past its NextUpdate, so the CA re-signs it (an update with
	// nothing to revoke) before then.
	Now      time.Time
	Lifetime time.Duration
}

// UpdateCRL signs the CA's next revocation list: the entries of prev (nil
// for the first list) plus u.Revoke, numbered one past prev. The CA keeps
// no other state: the last list is the record of what it revoked.
func (a *Authority) UpdateCRL(prev *x509.RevocationList, u CRLUpdate) (*x509.RevocationList, error) {
	now := u.Now
	if now.IsZero() {
		now = time.Now()
	}
	now = now.UTC().Truncate(time.Second)
	life := u.Lifetime
	if life <= 0 {
		life = DefaultCRLLifetime
	}
	number := big.NewInt(1)
	var entries []x509.RevocationListEntry
	seen := map[string]bool{}
	if prev != nil {
		if err := prev.CheckSignatureFrom(a.Cert); err != nil {
			return nil, fmt.Errorf("ca: the previous revocation list is not this CA's: %w", err)
		}
		if prev.Number != nil {
			number.Add(prev.Number, big.NewInt(1))
		}
		for _, e := range prev.RevokedCertificateEntries {
			seen[e.SerialNumber.String()] = true
			entries = append(entries, x509.RevocationListEntry{
				SerialNumber: e.SerialNumber, RevocationTime: e.RevocationTime, ReasonCode: e.ReasonCode,
			})
		}
	}
	for _, s := range u.Revoke {
		if s == nil || s.Sign() <= 0 {
			return nil, errors.New("ca: a serial number to revoke must be positive")
		}
		if seen[s.String()] {
			continue
		}
		seen[s.String()] = true
		entries = append(entries, x509.RevocationListEntry{SerialNumber: s, RevocationTime: now, ReasonCode: u.Reason})
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number:                    number,
		ThisUpdate:                now.Add(-Backdate),
		NextUpdate:                now.Add(life),
		RevokedCertificateEntries: entries,
	}, a.Cert, a.key)
	if err != nil {
		return nil, fmt.Errorf("ca: revocation list: %w", err)
	}
	return x509.ParseRevocationList(der)
}

// PEM block types of certificates and revocation lists.
const (
	TypeCertificate = "CERTIFICATE"
	TypeCRL         = "X509 CRL"
)

// EncodeCertificates encodes certificates as PEM, in order.
func EncodeCertificates(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: TypeCertificate, Bytes: c.Raw})...)
	}
	return out
}

// ParseCertificates decodes one or more PEM CERTIFICATE blocks (a
// certificate file, the CA roots file), refusing other blocks and other
// data.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != TypeCertificate {
			return nil, fmt.Errorf("ca: a PEM %q block among certificates", blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("ca: certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if !blank(rest) {
		return nil, errors.New("ca: data that is not a PEM block among certificates")
	}
	if len(certs) == 0 {
		return nil, errors.New("ca: no certificate")
	}
	return certs, nil
}

// EncodeCRL encodes a revocation list as PEM.
func EncodeCRL(crl *x509.RevocationList) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: TypeCRL, Bytes: crl.Raw})
}

// ParseCRL decodes a revocation list, PEM or DER. It does not check the
// signature: chain.New does, against the configured CAs.
func ParseCRL(data []byte) (*x509.RevocationList, error) {
	if blk, rest := pem.Decode(data); blk != nil {
		if blk.Type != TypeCRL || !blank(rest) {
			return nil, fmt.Errorf("ca: want exactly one PEM %q block", TypeCRL)
		}
		data = blk.Bytes
	}
	crl, err := x509.ParseRevocationList(data)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	return crl, nil
}

func blank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}
