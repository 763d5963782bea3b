package proxy

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/keyfile"
)

type fixture struct {
	ca    *ca.Authority
	alice *Credential // a user
	node  *Credential // a node: may not sign proxies
}

func setup(t testing.TB) *fixture {
	t.Helper()
	a, err := ca.New(ca.Config{Name: "grid"})
	if err != nil {
		t.Fatal(err)
	}
	cred := func(role ca.Role, name string) *Credential {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		c, err := a.Issue(ca.Request{Role: role, Name: name, Key: priv.Public()})
		if err != nil {
			t.Fatal(err)
		}
		return &Credential{Chain: []*x509.Certificate{c}, Key: priv}
	}
	return &fixture{ca: a, alice: cred(ca.User, "alice"), node: cred(ca.Node, "n1")}
}

func TestNew(t *testing.T) {
	f := setup(t)
	p, err := New(f.alice, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, user := p.Leaf(), f.alice.Leaf()
	if len(p.Chain) != 2 || p.Chain[1] != user {
		t.Fatalf("chain of %d", len(p.Chain))
	}
	if err := user.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c.RawIssuer, user.RawSubject) || !ExtendsSubject(c.RawSubject, user.RawSubject) {
		t.Errorf("subject %s, issuer %s", c.Subject, c.Issuer)
	}
	if c.Subject.CommonName != c.SerialNumber.String() {
		t.Errorf("CN %q, serial %v", c.Subject.CommonName, c.SerialNumber)
	}
	if life := c.NotAfter.Sub(c.NotBefore); life != DefaultLifetime+ca.Backdate {
		t.Errorf("lifetime %v", life)
	}
	info, ok, err := Of(c)
	if err != nil || !ok || info.Policy != InheritAll || info.HasPathLen {
		t.Errorf("info %+v, %v, %v", info, ok, err)
	}
	if c.IsCA || c.BasicConstraintsValid || c.KeyUsage != x509.KeyUsageDigitalSignature || len(c.URIs) != 0 {
		t.Errorf("CA %v, key usage %v", c.IsCA, c.KeyUsage)
	}
	if tc := p.Certificate(); len(tc.Certificate) != 2 || tc.PrivateKey == nil || tc.Leaf != c {
		t.Errorf("TLS certificate %+v", tc)
	}
}

func TestNeverOutlivesIssuer(t *testing.T) {
	f := setup(t)
	p1, err := New(f.alice, Options{Lifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := New(p1, Options{Lifetime: 100 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if !p2.Leaf().NotAfter.Equal(p1.Leaf().NotAfter) {
		t.Errorf("proxy until %s, issuer until %s", p2.Leaf().NotAfter, p1.Leaf().NotAfter)
	}
	if _, err := New(p1, Options{Start: time.Now().Add(2 * time.Hour)}); err == nil {
		t.Error("proxy of an expired issuer made")
	}
}

func TestIssueRefuses(t *testing.T) {
	f := setup(t)
	if _, err := New(f.node, Options{}); err == nil || !strings.Contains(err.Error(), "only users") {
		t.Errorf("node signed a proxy: %v", err)
	}
	leaf, err := New(f.alice, Options{LimitPath: true, PathLen: 0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(leaf, Options{}); !errors.Is(err, ErrNoProxyLeft) {
		t.Errorf("proxy with path length 0 signing a proxy: %v; want ErrNoProxyLeft", err)
	}
	one, err := New(f.alice, Options{LimitPath: true, PathLen: 1})
	if err != nil {
		t.Fatal(err)
	}
	two, err := New(one, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(two, Options{}); !errors.Is(err, ErrNoProxyLeft) {
		t.Errorf("path length 1 and two proxies: %v; want ErrNoProxyLeft", err)
	}
	wrong := &Credential{Chain: f.alice.Chain, Key: f.node.Key}
	if _, err := New(wrong, Options{}); err == nil {
		t.Error("credential with a key not its certificate's signed")
	}
	if _, err := New(f.alice, Options{Restrict: []string{"1bad"}}); err == nil {
		t.Error("bad service name accepted")
	}
	if _, err := New(f.alice, Options{Restrict: []string{}}); err == nil {
		t.Error("empty restriction accepted")
	}
	if _, err := New(f.alice, Options{Restrict: []string{"x"}, Independent: true}); err == nil {
		t.Error("restricted independent proxy made")
	}
	if _, err := New(f.alice, Options{LimitPath: true, PathLen: -1}); err == nil {
		t.Error("negative path length accepted")
	}
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	if _, err := Issue(f.alice, p224.Public(), Options{}); err == nil {
		t.Error("P-224 key certified")
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("nil issuer")
	}
}

func TestRestrictionInherited(t *testing.T) {
	f := setup(t)
	r, err := New(f.alice, Options{Restrict: []string{"xfer", "gridftp", "xfer"}})
	if err != nil {
		t.Fatal(err)
	}
	info, _, _ := Of(r.Leaf())
	if info.Policy != Restricted || !slices.Equal(info.Services, []string{"gridftp", "xfer"}) || info.Language != RestrictedLanguage {
		t.Fatalf("info %+v", info)
	}
	// A child is restricted as its parent is unless told otherwise...
	child, err := New(r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if info, _, _ := Of(child.Leaf()); !slices.Equal(info.Services, []string{"gridftp", "xfer"}) {
		t.Errorf("child %+v", info)
	}
	// ...may narrow it...
	narrow, err := New(r, Options{Restrict: []string{"xfer"}})
	if err != nil {
		t.Fatal(err)
	}
	if info, _, _ := Of(narrow.Leaf()); !slices.Equal(info.Services, []string{"xfer"}) {
		t.Errorf("narrowed %+v", info)
	}
	// ...and never widen it or escape it.
	if _, err := New(narrow, Options{Restrict: []string{"gridftp"}}); err == nil {
		t.Error("restriction widened")
	}
	if _, err := New(narrow, Options{Independent: true}); err == nil {
		t.Error("independent proxy of a restricted one")
	}
}

func TestECDSA(t *testing.T) {
	f := setup(t)
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	c, err := f.ca.Issue(ca.Request{Role: ca.User, Name: "bob", Key: k.Public()})
	if err != nil {
		t.Fatal(err)
	}
	bob := &Credential{Chain: []*x509.Certificate{c}, Key: k}
	p, err := New(bob, Options{})
	if err != nil {
		t.Fatal(err)
	}
	pk, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	c2, err := Issue(p, pk.Public(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Leaf().CheckSignature(c2.SignatureAlgorithm, c2.RawTBSCertificate, c2.Signature); err != nil {
		t.Fatal(err)
	}
}

func TestFile(t *testing.T) {
	f := setup(t)
	p1, _ := New(f.alice, Options{})
	p2, _ := New(p1, Options{})
	path := filepath.Join(t.TempDir(), "x509up_u1000")
	if err := Save(path, p2); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode())
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Chain) != 3 || !got.Leaf().Equal(p2.Leaf()) || !got.Chain[2].Equal(f.alice.Leaf()) {
		t.Fatalf("chain of %d", len(got.Chain))
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), "-----BEGIN CERTIFICATE-----") || strings.Count(string(data), "PRIVATE KEY-----") != 2 {
		t.Errorf("layout:\n%s", data)
	}
	os.Chmod(path, 0o640)
	var pe *keyfile.PermissionError
	if _, err := Load(path); !errors.As(err, &pe) {
		t.Errorf("group-readable proxy loaded: %v", err)
	}
}

func TestParseStrict(t *testing.T) {
	f := setup(t)
	p, _ := New(f.alice, Options{})
	good, err := Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	cert := ca.EncodeCertificates(p.Leaf())
	key, _ := keyfile.Marshal(p.Key)
	user := ca.EncodeCertificates(f.alice.Leaf())
	otherKey, _ := keyfile.Marshal(f.alice.Key)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for name, data := range map[string][]byte{
		"empty":       nil,
		"key first":   cat(key, cert, user),
		"no key":      cat(cert, user),
		"two keys":    cat(cert, key, key, user),
		"wrong key":   cat(cert, otherKey, user),
		"trailing":    cat(good, []byte("junk")),
		"other block": cat(cert, key, []byte("-----BEGIN X509 CRL-----\nAA==\n-----END X509 CRL-----\n")),
	} {
		if _, err := Parse(data); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	if c, err := Parse(cat(cert, key)); err != nil || len(c.Chain) != 1 {
		t.Errorf("certificate and key alone: %v", err)
	}
}
