package chain

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"strings"
	"time"

	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/proxy"
)

var (
	oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}
	oidIssuerAltName  = asn1.ObjectIdentifier{2, 5, 29, 18}
)

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// dn prints a DER Name with every attribute (pkix.Name.String keeps one
// CN of a proxy's several); one with attributes Go has no name for (the
// DC of most grid certificates, which it prints as OID=#hex) as Globus
// writes it, /DC=org/DC=example/CN=Alice Smith.
func dn(raw []byte) string {
	var rdns pkix.RDNSequence
	if rest, err := asn1.Unmarshal(raw, &rdns); err != nil || len(rest) != 0 {
		return "(undecodable name)"
	}
	s := rdns.String()
	if strings.Contains(s, "=#") {
		return ca.NameDN(raw)
	}
	return s
}

// VerifyCertificates validates a parsed chain, leaf first, at time at
// (zero: now):
//
//   - the last certificate (a configured root after it is ignored) is the
//     end-entity certificate of a hub, node or user; it must be signed by
//     a configured CA, valid at at, not revoked, not a CA, with key usage
//     digitalSignature and not keyCertSign, carry a gridlink role, and
//     pass crypto/x509's path validation to that CA, which must be valid;
//   - every certificate before it is a proxy (RFC 3820 §4), numbered from
//     the end-entity certificate: issued and signed by the certificate
//     after it (a user's certificate or a proxy), subject the issuer's
//     plus one CN, valid at at, not outliving its issuer nor longer-lived
//     than MaxProxyLifetime, a critical well-formed ProxyCertInfo,
//     digitalSignature and not keyCertSign, not a CA, no alternative
//     names, no other unknown critical extension, within every
//     pCPathLenConstraint above it, and a policy gridlink knows that is
//     at least as restricted as the restriction above it;
//   - keys are Ed25519, ECDSA P-256/P-384 or RSA of MinRSABits or more,
//     signatures Ed25519, ECDSA or RSA (PKCS #1 v1.5 or PSS) with SHA-2;
//   - an end-entity certificate of a federation CA (Config.UserCAs) is a
//     user's, named by its subject (ca.ForeignAttributes).
//
// The first failure is returned as an *Error.
func (v *Verifier) VerifyCertificates(certs []*x509.Certificate, at time.Time) (*Result, error) {
	if len(certs) == 0 {
		return nil, fail(-1, "chain", ErrNoCertificate, "no certificate")
	}
	if at.IsZero() {
		at = time.Now()
	}
	for i, c := range certs {
		if c == nil {
			return nil, fail(i, fmt.Sprintf("certificate %d of %d", i+1, len(certs)), ErrMalformed, "missing (nil)")
		}
	}
	n := len(certs)
	if n > 1 && v.isRoot(certs[n-1]) {
		n-- // a peer may send the root too
	}
	if n > v.cfg.MaxProxies+1 {
		return nil, fail(-1, "chain", ErrMalformed, "%d proxies, at most %d", n-1, v.cfg.MaxProxies)
	}
	ei := n - 1
	eec := certs[ei]
	if _, isProxy, _ := proxy.Of(eec); isProxy {
		return nil, fail(ei, fmt.Sprintf("certificate %d of %d", ei+1, len(certs)), ErrIncomplete,
			"the chain ends at a proxy certificate (%s): the certificates it derives from, up to the user's, are missing", dn(eec.RawSubject))
	}
	if n > 1 && eec.BasicConstraintsValid && eec.IsCA {
		return nil, fail(ei, "CA "+dn(eec.RawSubject), ErrUnknownCA,
			"not a configured CA (the grid's CAs issue end-entity certificates directly; sub-CAs are not supported)")
	}
	res, err := v.endEntity(certs, ei, at)
	if err != nil {
		return nil, err
	}
	p := proxyState{left: -1, parentName: "the end-entity certificate"}
	for k := 1; k < n; k++ {
		if err := v.proxy(certs, ei-k, k, at, res, &p); err != nil {
			return nil, err
		}
	}
	res.Proxies = n - 1
	res.Leaf = certs[0]
	res.Restriction = p.restrict
	return res, nil
}

func (v *Verifier) isRoot(c *x509.Certificate) bool {
	for _, r := range v.roots {
		if bytes.Equal(c.Raw, r.cert.Raw) {
			return true
		}
	}
	return false
}

// endEntity checks the end-entity certificate certs[i] and its CA.
func (v *Verifier) endEntity(certs []*x509.Certificate, i int, at time.Time) (*Result, error) {
	c := certs[i]
	name := "end-entity certificate " + dn(c.RawSubject)
	if why := algorithms(c); why != "" {
		return nil, fail(i, name, ErrAlgorithm, "%s", why)
	}
	if c.BasicConstraintsValid && c.IsCA {
		return nil, fail(i, name, ErrKeyUsage, "is a CA certificate, not an end entity's")
	}
	var r *root
	named := false
	for _, cand := range v.roots {
		if !bytes.Equal(cand.cert.RawSubject, c.RawIssuer) {
			continue
		}
		named = true
		if c.CheckSignatureFrom(cand.cert) == nil {
			r = cand
			break
		}
	}
	switch {
	case !named && bytes.Equal(c.RawIssuer, c.RawSubject):
		// What a hub or node of an open grid presents: its bare key.
		return nil, fail(i, name, ErrSelfSigned, "certificate not signed by a configured CA: it is self-signed, so the peer holds no certificate from this grid's CA")
	case !named:
		return nil, fail(i, name, ErrUnknownCA, "certificate not signed by a configured CA: its issuer %s is none of them", dn(c.RawIssuer))
	case r == nil:
		return nil, fail(i, name, ErrSignature, "certificate not signed by a configured CA: its signature does not verify with the key of %s", dn(c.RawIssuer))
	}
	caName := "CA " + dn(r.cert.RawSubject)
	caIndex := -1
	if len(certs) > i+1 {
		caIndex = i + 1
	}
	if err := validity(caIndex, caName, r.cert, at); err != nil {
		return nil, err
	}
	if err := validity(i, name, c, at); err != nil {
		return nil, err
	}
	if r.crl != nil {
		if at.After(r.crl.NextUpdate) && !v.cfg.AllowStaleCRL {
			return nil, fail(i, name, ErrStaleCRL, "cannot check revocation: the revocation list of %s (number %v) expired at %s; the CA must issue a new one",
				caName, r.crl.Number, stamp(r.crl.NextUpdate))
		}
		if when, ok := r.revoked[c.SerialNumber.String()]; ok {
			return nil, fail(i, name, ErrRevoked, "revoked: serial %v (since %s)", c.SerialNumber, stamp(when))
		}
	}
	if c.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
		return nil, fail(i, name, ErrKeyUsage, "key usage lacks digitalSignature")
	}
	if c.KeyUsage&(x509.KeyUsageCertSign|x509.KeyUsageCRLSign) != 0 {
		return nil, fail(i, name, ErrKeyUsage, "key usage includes keyCertSign or cRLSign, which only the CA's may")
	}
	attrs, err := ca.AttributesOf(c)
	if r.user {
		attrs, err = ca.ForeignAttributes(c)
	}
	if err != nil {
		return nil, fail(i, name, ErrMalformed, "%v", err)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: r.pool, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fail(i, name, ErrMalformed, "fails X.509 path validation: %v", err)
	}
	notAfter := c.NotAfter
	if r.cert.NotAfter.Before(notAfter) {
		notAfter = r.cert.NotAfter
	}
	return &Result{Attributes: attrs, EndEntity: c, CA: r.cert, NotAfter: notAfter}, nil
}

// proxyState is what the proxies checked so far impose on the next.
type proxyState struct {
	parentName  string
	left        int    // proxies that may still follow (-1: no limit)
	limitBy     string // the proxy that set left
	limit       int    // and the limit it set
	restrict    []string
	restrictBy  string
	independent bool
}

// proxy checks certs[i], proxy number k, against its issuer certs[i+1].
func (v *Verifier) proxy(certs []*x509.Certificate, i, k int, at time.Time, res *Result, s *proxyState) error {
	c, parent := certs[i], certs[i+1]
	name := fmt.Sprintf("proxy %d", k)
	info, isProxy, err := proxy.Of(c)
	switch {
	case err != nil:
		return fail(i, name, ErrMalformed, "%s", strings.TrimPrefix(err.Error(), "proxy: "))
	case !isProxy && proxy.Legacy(c.RawSubject, parent.RawSubject):
		return fail(i, name, ErrNotProxy,
			"%s is a legacy Globus proxy (CN=proxy, before RFC 3820), which gridlink does not accept: make an RFC 3820 proxy (grid-proxy-init -rfc, the default of Globus 6, or voms-proxy-init -rfc)",
			dn(c.RawSubject))
	case !isProxy:
		return fail(i, fmt.Sprintf("certificate %d of %d", i+1, len(certs)), ErrNotProxy,
			"%s is not a proxy certificate, yet it follows %s: only proxies follow a user's certificate, and users and proxies sign nothing else",
			dn(c.RawSubject), s.parentName)
	}
	if why := algorithms(c); why != "" {
		return fail(i, name, ErrAlgorithm, "%s", why)
	}
	if !bytes.Equal(c.RawIssuer, parent.RawSubject) {
		return fail(i, name, ErrIssuer, "issued by %s, not by %s that follows it: a certificate is missing, extra or out of order",
			dn(c.RawIssuer), dn(parent.RawSubject))
	}
	if k == 1 && res.Role != ca.User {
		return fail(i, name, ErrKeyUsage, "signed by a %s certificate: only users' certificates (and their proxies) sign proxies", res.Role)
	}
	// The issuer's key usage (digitalSignature) was checked with the issuer.
	if err := parent.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature); err != nil {
		return fail(i, name, ErrSignature, "not signed by the key of its issuer %s (%s): %v", s.parentName, dn(parent.RawSubject), err)
	}
	if !proxy.ExtendsSubject(c.RawSubject, parent.RawSubject) {
		return fail(i, name, ErrSubject, "subject %s does not extend its issuer's (%s) by one CN", dn(c.RawSubject), dn(parent.RawSubject))
	}
	if err := validity(i, name, c, at); err != nil {
		return err
	}
	if c.NotAfter.After(parent.NotAfter) {
		return fail(i, name, ErrLifetime, "outlives its issuer: valid until %s, %s only until %s", stamp(c.NotAfter), s.parentName, stamp(parent.NotAfter))
	}
	if life := c.NotAfter.Sub(c.NotBefore); v.cfg.MaxProxyLifetime > 0 && life > v.cfg.MaxProxyLifetime {
		return fail(i, name, ErrLifetime, "valid for %v, longer than the %v a proxy may be", life, v.cfg.MaxProxyLifetime)
	}
	switch {
	case c.KeyUsage&(x509.KeyUsageCertSign|x509.KeyUsageCRLSign) != 0:
		return fail(i, name, ErrKeyUsage, "key usage includes keyCertSign or cRLSign, which a proxy must not")
	case c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageDigitalSignature == 0:
		return fail(i, name, ErrKeyUsage, "key usage lacks digitalSignature")
	case c.BasicConstraintsValid && c.IsCA:
		return fail(i, name, ErrKeyUsage, "is marked as a CA, which a proxy must not be")
	}
	for _, e := range c.Extensions {
		if e.Id.Equal(oidSubjectAltName) || e.Id.Equal(oidIssuerAltName) {
			return fail(i, name, ErrMalformed, "carries an alternative name, which a proxy must not (RFC 3820 §3.5)")
		}
	}
	for _, id := range c.UnhandledCriticalExtensions {
		if !id.Equal(proxy.OIDProxyCertInfo) {
			return fail(i, name, ErrMalformed, "unknown critical extension %v", id)
		}
	}
	if s.left == 0 {
		return fail(i, name, ErrPathLength, "%s allows at most %d proxies after it", s.limitBy, s.limit)
	}
	if s.left > 0 {
		s.left--
	}
	if info.HasPathLen && (s.left < 0 || info.PathLen < s.left) {
		s.left, s.limitBy, s.limit = info.PathLen, name, info.PathLen
	}
	if err := s.policy(i, name, info, v.cfg.AllowIndependent); err != nil {
		return err
	}
	res.Independent = s.independent
	if c.NotAfter.Before(res.NotAfter) {
		res.NotAfter = c.NotAfter
	}
	s.parentName = name
	return nil
}

// policy checks a proxy's policy against the restriction above it.
func (s *proxyState) policy(i int, name string, info proxy.Info, allowIndependent bool) error {
	switch info.Policy {
	case proxy.OtherPolicy:
		return fail(i, name, ErrPolicy, "policy language %s is not one gridlink knows", info.Language)
	case proxy.Independent:
		if !allowIndependent {
			return fail(i, name, ErrPolicy, "is an independent proxy, which this verifier does not accept")
		}
		if s.restrict != nil {
			return fail(i, name, ErrPolicy, "is independent, but %s is restricted to %v: a restricted proxy's proxies must be at least as restricted", s.restrictBy, s.restrict)
		}
		s.independent = true
	case proxy.InheritAll:
		if s.restrict != nil {
			return fail(i, name, ErrPolicy, "is unrestricted (inheritAll), but %s is restricted to %v: a restricted proxy's proxies must be at least as restricted", s.restrictBy, s.restrict)
		}
	case proxy.Restricted:
		if s.restrict != nil && !proxy.Subset(info.Services, s.restrict) {
			return fail(i, name, ErrPolicy, "allows %v, beyond the restriction of %s to %v", info.Services, s.restrictBy, s.restrict)
		}
		s.restrict, s.restrictBy = info.Services, name
	}
	return nil
}

func validity(i int, name string, c *x509.Certificate, at time.Time) error {
	if at.Before(c.NotBefore) {
		return fail(i, name, ErrNotYetValid, "not valid before %s", stamp(c.NotBefore))
	}
	if at.After(c.NotAfter) {
		return fail(i, name, ErrExpired, "expired at %s", stamp(c.NotAfter))
	}
	return nil
}

// MinRSABits is the smallest RSA key a chain may hold (grid certificates
// and the proxies grid-proxy-init makes are RSA, 2048 bits and more).
const MinRSABits = 2048

// algorithms says what is wrong with a certificate's key or signature
// algorithm, or "".
func algorithms(c *x509.Certificate) string {
	switch k := c.PublicKey.(type) {
	case ed25519.PublicKey:
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return fmt.Sprintf("an ECDSA key on %s: gridlink accepts P-256 and P-384", k.Curve.Params().Name)
		}
	case *rsa.PublicKey:
		if k.N.BitLen() < MinRSABits {
			return fmt.Sprintf("an RSA key of %d bits: gridlink accepts %d bits and more", k.N.BitLen(), MinRSABits)
		}
	default:
		return fmt.Sprintf("a %v key: gridlink accepts Ed25519, ECDSA and RSA", c.PublicKeyAlgorithm)
	}
	switch c.SignatureAlgorithm {
	case x509.PureEd25519, x509.ECDSAWithSHA256, x509.ECDSAWithSHA384, x509.ECDSAWithSHA512,
		x509.SHA256WithRSA, x509.SHA384WithRSA, x509.SHA512WithRSA,
		x509.SHA256WithRSAPSS, x509.SHA384WithRSAPSS, x509.SHA512WithRSAPSS:
		return ""
	}
	return fmt.Sprintf("signed with %v: gridlink accepts Ed25519, ECDSA and RSA signatures with SHA-2", c.SignatureAlgorithm)
}
