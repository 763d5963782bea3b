package chain

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/proxy"
	"golang.org/x/crypto/cryptobyte"
	"golang.org/x/crypto/cryptobyte/asn1"
)

// world is a grid: its CA, users, a node, and CAs it does not trust.
type world struct {
	now         time.Time
	ca          *ca.Authority
	other, twin *ca.Authority // a foreign CA, and one with the grid CA's very name
	alice, bob  *proxy.Credential
	node        *proxy.Credential
	nodeKey     identity.Key
	v           *Verifier
}

func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{now: time.Now().UTC().Truncate(time.Second)}
	mk := func(name string) *ca.Authority {
		a, err := ca.New(ca.Config{Name: name, Start: w.now.Add(-365 * 24 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	w.ca, w.other, w.twin = mk("grid"), mk("elsewhere"), mk("grid")
	w.alice = w.user(t, w.ca, "alice", w.now.Add(-30*24*time.Hour), 0)
	w.bob = w.user(t, w.ca, "bob", w.now.Add(-30*24*time.Hour), 0)
	var err error
	if w.nodeKey, err = identity.NewKey(); err != nil {
		t.Fatal(err)
	}
	nc, err := w.ca.Issue(ca.Request{Role: ca.Node, Name: "das3v-n1", Groups: []string{"vu"}, Key: w.nodeKey.ID().PublicKey(), Start: w.now.Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	w.node = &proxy.Credential{Chain: []*x509.Certificate{nc}, Key: w.nodeKey.Private()}
	w.v = w.verifier(t, Config{})
	return w
}

func (w *world) verifier(t testing.TB, c Config) *Verifier {
	t.Helper()
	if c.Roots == nil {
		c.Roots = []*x509.Certificate{w.ca.Cert}
	}
	v, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// user issues a user certificate (Ed25519) valid from start.
func (w *world) user(t testing.TB, a *ca.Authority, name string, start time.Time, life time.Duration) *proxy.Credential {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Issue(ca.Request{Role: ca.User, Name: name, Key: priv.Public(), Start: start, Lifetime: life})
	if err != nil {
		t.Fatal(err)
	}
	return &proxy.Credential{Chain: []*x509.Certificate{c}, Key: priv}
}

func mkProxy(t testing.TB, issuer *proxy.Credential, o proxy.Options) *proxy.Credential {
	t.Helper()
	p, err := proxy.New(issuer, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func raw(c *proxy.Credential) [][]byte { return c.Certificate().Certificate }

// appendCN appends the RDN CN=cn to a DER Name.
func appendCN(name []byte, cn string) []byte {
	in := cryptobyte.String(name)
	var rdns cryptobyte.String
	in.ReadASN1(&rdns, asn1.SEQUENCE)
	var b cryptobyte.Builder
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddBytes(rdns)
		b.AddASN1(asn1.SET, func(b *cryptobyte.Builder) {
			b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
				b.AddASN1ObjectIdentifier([]int{2, 5, 4, 3})
				b.AddASN1(asn1.UTF8String, func(b *cryptobyte.Builder) { b.AddBytes([]byte(cn)) })
			})
		})
	})
	return b.BytesOrPanic()
}

// craft signs, with signer (nil: the issuer's key), a proxy-like
// certificate of issuer for a new key, from a template mod may change:
// the failure paths proxy.Issue refuses to produce.
func (w *world) craft(t testing.TB, issuer *proxy.Credential, signer crypto.Signer, mod func(*x509.Certificate)) *proxy.Credential {
	t.Helper()
	return w.craftKey(t, issuer, signer, nil, mod)
}

// craftKey is craft for key (nil: a new Ed25519 key).
func (w *world) craftKey(t testing.TB, issuer *proxy.Credential, signer, key crypto.Signer, mod func(*x509.Certificate)) *proxy.Credential {
	t.Helper()
	parent := *issuer.Leaf()
	parent.PublicKey = nil // lets a wrong signer sign
	if signer == nil {
		signer = issuer.Key
	}
	ext, err := proxy.Info{}.Extension()
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := ca.NewSerial()
	tmpl := &x509.Certificate{
		SerialNumber:    serial,
		RawSubject:      appendCN(parent.RawSubject, serial.String()),
		NotBefore:       w.now.Add(-time.Hour),
		NotAfter:        w.now.Add(time.Hour),
		KeyUsage:        x509.KeyUsageDigitalSignature,
		ExtraExtensions: []pkix.Extension{ext},
	}
	if mod != nil {
		mod(tmpl)
	}
	if key == nil {
		_, key, _ = ed25519.GenerateKey(rand.Reader)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, &parent, key.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &proxy.Credential{Chain: append([]*x509.Certificate{c}, issuer.Chain...), Key: key}
}

// craftEEC signs, with the grid CA, an end-entity certificate from a
// template mod may change, for key (nil: a new Ed25519 key).
func (w *world) craftEEC(t testing.TB, key crypto.Signer, mod func(*x509.Certificate)) *proxy.Credential {
	t.Helper()
	if key == nil {
		_, key, _ = ed25519.GenerateKey(rand.Reader)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(99),
		Subject:               pkix.Name{Organization: []string{"grid"}, OrganizationalUnit: []string{"user"}, CommonName: "eve"},
		NotBefore:             w.now.Add(-time.Hour),
		NotAfter:              w.now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	if mod != nil {
		mod(tmpl)
	}
	return issue(t, tmpl, w.ca.Cert, key, w.ca.Key())
}

// issue signs tmpl for key with signer as parent's key: a credential of
// that one certificate.
func issue(t testing.TB, tmpl, parent *x509.Certificate, key, signer crypto.Signer) *proxy.Credential {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &proxy.Credential{Chain: []*x509.Certificate{c}, Key: key}
}

func TestNode(t *testing.T) {
	w := newWorld(t)
	r, err := w.v.Verify(raw(w.node), w.now)
	if err != nil {
		t.Fatal(err)
	}
	id, err := r.NodeID()
	if err != nil || id != w.nodeKey.ID() {
		t.Fatalf("node ID %s, %v; want %s", id.Short(), err, w.nodeKey.ID().Short())
	}
	if r.Name != "das3v-n1" || r.Role != ca.Node || !slices.Equal(r.Groups, []string{"vu"}) || r.Proxies != 0 || r.Leaf != r.EndEntity {
		t.Errorf("result %+v", r)
	}
	if r.Subject() != "CN=das3v-n1,OU=node,O=grid" || !r.CA.Equal(w.ca.Cert) || !r.Allows("anything", identity.ID{}) {
		t.Errorf("subject %s", r.Subject())
	}
}

func TestUserProxies(t *testing.T) {
	w := newWorld(t)
	r, err := w.v.Verify(raw(w.alice), w.now)
	if err != nil || r.Name != "alice" || r.Role != ca.User || r.Proxies != 0 {
		t.Fatalf("user alone: %+v, %v", r, err)
	}
	if _, err := r.NodeID(); err == nil {
		t.Error("a user has a node ID")
	}
	p1 := mkProxy(t, w.alice, proxy.Options{Start: w.now})
	p2 := mkProxy(t, p1, proxy.Options{Start: w.now, Lifetime: time.Hour})
	r, err = w.v.Verify(raw(p2), w.now)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "alice" || r.Proxies != 2 || !r.Leaf.Equal(p2.Leaf()) || r.Restriction != nil || r.Independent {
		t.Errorf("result %+v", r)
	}
	if !r.NotAfter.Equal(p2.Leaf().NotAfter) {
		t.Errorf("NotAfter %s, want the leaf's %s", r.NotAfter, p2.Leaf().NotAfter)
	}
	// The root may come along.
	if _, err := w.v.Verify(append(raw(p2), w.ca.Cert.Raw), w.now); err != nil {
		t.Errorf("with the root: %v", err)
	}
	// Parsed certificates.
	if _, err := w.v.VerifyCertificates(p2.Chain, time.Time{}); err != nil {
		t.Errorf("VerifyCertificates now: %v", err)
	}
}

func TestRestricted(t *testing.T) {
	w := newWorld(t)
	r1 := mkProxy(t, w.alice, proxy.Options{Restrict: []string{"xfer", "perf"}})
	r2 := mkProxy(t, r1, proxy.Options{Restrict: []string{"xfer"}})
	r3 := mkProxy(t, r2, proxy.Options{}) // inherits xfer
	res, err := w.v.Verify(raw(r3), w.now)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Restriction, []string{"xfer"}) || !res.Allows("xfer", identity.ID{}) || res.Allows("perf", identity.ID{}) {
		t.Errorf("restriction %v", res.Restriction)
	}
}

func TestIndependentAllowed(t *testing.T) {
	w := newWorld(t)
	p := mkProxy(t, w.alice, proxy.Options{Independent: true})
	child := mkProxy(t, p, proxy.Options{})
	v := w.verifier(t, Config{AllowIndependent: true})
	r, err := v.Verify(raw(child), w.now)
	if err != nil || !r.Independent {
		t.Fatalf("%+v, %v", r, err)
	}
}

func TestECDSA(t *testing.T) {
	w := newWorld(t)
	k, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	c, err := w.ca.Issue(ca.Request{Role: ca.User, Name: "carol", Key: k.Public()})
	if err != nil {
		t.Fatal(err)
	}
	carol := &proxy.Credential{Chain: []*x509.Certificate{c}, Key: k}
	pk, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	pc, err := proxy.Issue(carol, pk.Public(), proxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy.Credential{Chain: []*x509.Certificate{pc, c}, Key: pk}
	if r, err := w.v.Verify(raw(mkProxy(t, p, proxy.Options{})), w.now); err != nil || r.Name != "carol" || r.Proxies != 2 {
		t.Fatalf("%+v, %v", r, err)
	}
}

func TestDelegated(t *testing.T) {
	w := newWorld(t)
	mine := mkProxy(t, w.alice, proxy.Options{})
	pending, req, err := proxy.NewRequest(0, []string{"xfer"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := proxy.ParseRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, err := proxy.Delegate(mine, r, proxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := pending.Accept(answer)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.v.Verify(raw(got), w.now)
	if err != nil || res.Name != "alice" || res.Proxies != 2 || !slices.Equal(res.Restriction, []string{"xfer"}) {
		t.Fatalf("%+v, %v", res, err)
	}
}

func TestCRLs(t *testing.T) {
	w := newWorld(t)
	l1, err := w.ca.UpdateCRL(nil, ca.CRLUpdate{Revoke: []*big.Int{w.bob.Leaf().SerialNumber}, Now: w.now})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := w.ca.UpdateCRL(l1, ca.CRLUpdate{Revoke: []*big.Int{w.alice.Leaf().SerialNumber}, Now: w.now})
	if err != nil {
		t.Fatal(err)
	}
	// Only bob revoked (list 1): alice passes.
	v1 := w.verifier(t, Config{CRLs: []*x509.RevocationList{l1}})
	if _, err := v1.Verify(raw(w.alice), w.now); err != nil {
		t.Errorf("alice under list 1: %v", err)
	}
	// The highest numbered list applies, in whatever order given.
	v2 := w.verifier(t, Config{CRLs: []*x509.RevocationList{l2, l1}})
	if _, err := v2.Verify(raw(w.alice), w.now); err == nil {
		t.Error("alice passes list 2")
	}
	// A stale list refuses everyone, unless allowed.
	later := w.now.Add(ca.DefaultCRLLifetime + time.Hour)
	if _, err := v1.Verify(raw(w.alice), later); err == nil {
		t.Error("stale list accepted")
	}
	v3 := w.verifier(t, Config{CRLs: []*x509.RevocationList{l1}, AllowStaleCRL: true})
	if _, err := v3.Verify(raw(w.alice), later); err != nil {
		t.Errorf("stale list allowed: %v", err)
	}
}

func TestNewRefuses(t *testing.T) {
	w := newWorld(t)
	flipped, err := x509.ParseCertificate(flipLast(w.ca.Cert.Raw))
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := w.other.UpdateCRL(nil, ca.CRLUpdate{})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]Config{
		"no roots":    {},
		"nil root":    {Roots: []*x509.Certificate{nil}},
		"user root":   {Roots: []*x509.Certificate{w.alice.Leaf()}},
		"bad root":    {Roots: []*x509.Certificate{flipped}},
		"foreign CRL": {Roots: []*x509.Certificate{w.ca.Cert}, CRLs: []*x509.RevocationList{foreign}},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestConcurrent(t *testing.T) {
	w := newWorld(t)
	p := mkProxy(t, mkProxy(t, w.alice, proxy.Options{}), proxy.Options{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if _, err := w.v.Verify(raw(p), w.now); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestVerifyCertificatesRefuses(t *testing.T) {
	w := newWorld(t)
	if _, err := w.v.VerifyCertificates(nil, w.now); !errors.Is(err, ErrNoCertificate) {
		t.Errorf("no certificates: %v", err)
	}
	var e *Error
	if _, err := w.v.VerifyCertificates([]*x509.Certificate{nil, w.alice.Leaf()}, w.now); !errors.As(err, &e) || e.Index != 0 || !errors.Is(err, ErrMalformed) {
		t.Errorf("nil certificate: %v", err)
	}
}

// TestRSA: grid certificates are mostly RSA: a user's RSA key of 2048
// bits and more and a CA signing with RSA are accepted, a shorter RSA key
// refused (issue 34).
func TestRSA(t *testing.T) {
	w := newWorld(t)
	short, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	// A user's short RSA key, certified by the grid CA.
	if _, err := w.v.Verify(raw(w.craftEEC(t, short, nil)), w.now); !errors.Is(err, ErrAlgorithm) || !strings.Contains(err.Error(), "an RSA key of 1024 bits: gridlink accepts 2048 bits and more") {
		t.Errorf("RSA-1024 user key: %v", err)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.v.Verify(raw(w.craftEEC(t, rk, nil)), w.now); err != nil {
		t.Errorf("RSA-2048 user key refused: %v", err)
	}
	// A CA signing with RSA: its certificates carry RSA signatures.
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{Organization: []string{"rsa"}, CommonName: "rsa CA"},
		NotBefore: w.now.Add(-time.Hour), NotAfter: w.now.Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, rk.Public(), rk)
	if err != nil {
		t.Fatal(err)
	}
	rootCert, _ := x509.ParseCertificate(der)
	_, uk, _ := ed25519.GenerateKey(rand.Reader)
	der, err = x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{Organization: []string{"rsa"}, OrganizationalUnit: []string{"user"}, CommonName: "u"},
		NotBefore: w.now.Add(-time.Hour), NotAfter: w.now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
	}, rootCert, uk.Public(), rk)
	if err != nil {
		t.Fatal(err)
	}
	v := w.verifier(t, Config{Roots: []*x509.Certificate{rootCert}})
	if _, err := v.Verify([][]byte{der}, w.now); err != nil {
		t.Errorf("RSA-signed user certificate refused: %v", err)
	}
	// A proxy for a P-224 key.
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	if _, err := w.v.Verify(raw(w.craftKey(t, w.alice, nil, p224, nil)), w.now); !errors.Is(err, ErrAlgorithm) || !strings.Contains(err.Error(), "proxy 1: an ECDSA key on P-224") {
		t.Errorf("P-224 proxy key: %v", err)
	}
}

// TestLegacyProxy: a legacy Globus proxy (subject the user's plus
// CN=proxy, no ProxyCertInfo) is refused, saying what it is and what to
// make instead (issue 34).
func TestLegacyProxy(t *testing.T) {
	w := newWorld(t)
	for _, cn := range []string{"proxy", "limited proxy"} {
		legacy := w.craft(t, w.alice, nil, func(c *x509.Certificate) {
			c.RawSubject = appendCN(w.alice.Leaf().RawSubject, cn)
			c.ExtraExtensions = nil
		})
		_, err := w.v.Verify(raw(legacy), w.now)
		if !errors.Is(err, ErrNotProxy) || !strings.Contains(err.Error(), "proxy 1: ") || !strings.Contains(err.Error(), "is a legacy Globus proxy (CN=proxy, before RFC 3820), which gridlink does not accept: make an RFC 3820 proxy") {
			t.Errorf("CN=%s: %v", cn, err)
		}
	}
}
