package ca

import (
	"bytes"
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
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
)

func newCA(t *testing.T, name string) *Authority {
	t.Helper()
	a, err := New(Config{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestNew(t *testing.T) {
	a := newCA(t, "das3")
	c := a.Cert
	if err := CheckCA(c); err != nil {
		t.Fatal(err)
	}
	if c.Subject.CommonName != "das3 CA" || a.Name() != "das3" || !c.MaxPathLenZero {
		t.Errorf("subject %s, name %q", c.Subject, a.Name())
	}
	if life := c.NotAfter.Sub(c.NotBefore); life != DefaultCALifetime+Backdate {
		t.Errorf("lifetime %v", life)
	}
	if k, ok := a.Key().(*rsa.PrivateKey); !ok || k.N.BitLen() != CARSABits {
		t.Errorf("key %T, want RSA of %d bits (which the Globus tools use)", a.Key(), CARSABits)
	}
	if _, err := New(Config{Name: "bad name"}); err == nil {
		t.Error("bad grid name accepted")
	}
	if _, err := New(Config{}); err == nil {
		t.Error("no grid name accepted")
	}
	rk, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Name: "rsa", Key: rk}); err == nil {
		t.Error("RSA CA made")
	}
	// A CA on an ECDSA key of the operator's choosing.
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if e, err := New(Config{Name: "ec", Key: k}); err != nil || e.Cert.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("ECDSA CA: %v", err)
	}
}

func TestLoad(t *testing.T) {
	a, b := newCA(t, "one"), newCA(t, "two")
	if _, err := Load(a.Cert, a.Key()); err != nil {
		t.Errorf("own key: %v", err)
	}
	if _, err := Load(a.Cert, b.Key()); err == nil {
		t.Error("another CA's key accepted")
	}
	if _, err := Load(nil, a.Key()); err == nil {
		t.Error("no certificate accepted")
	}
	// An end-entity certificate is no CA.
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	u, err := a.Issue(Request{Role: User, Name: "alice", Key: priv.Public()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Load(u, priv); err == nil {
		t.Error("user certificate loaded as a CA")
	}
}

func TestIssueNode(t *testing.T) {
	a := newCA(t, "grid")
	key, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Hour)
	c, err := a.Issue(Request{Role: Node, Name: "das3v-n1", Groups: []string{"vu", "das", "vu"}, Key: key.ID().PublicKey(), Start: start})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckSignatureFrom(a.Cert); err != nil {
		t.Fatal(err)
	}
	id, err := identity.IDFromPublicKey(c.PublicKey.(ed25519.PublicKey))
	if err != nil || id != key.ID() {
		t.Fatalf("certified ID %s, want %s", id.Short(), key.ID().Short())
	}
	attrs, err := AttributesOf(c)
	if err != nil {
		t.Fatal(err)
	}
	if attrs.Name != "das3v-n1" || attrs.Role != Node || !slices.Equal(attrs.Groups, []string{"das", "vu"}) {
		t.Errorf("attributes %+v", attrs)
	}
	if got := c.Subject.String(); got != "CN=das3v-n1,OU=node,O=grid" {
		t.Errorf("subject %s", got)
	}
	if c.IsCA || c.KeyUsage != x509.KeyUsageDigitalSignature || len(c.ExtKeyUsage) != 2 {
		t.Errorf("CA %v, key usage %v, ext %v", c.IsCA, c.KeyUsage, c.ExtKeyUsage)
	}
	want := start.UTC().Truncate(time.Second)
	if !c.NotBefore.Equal(want.Add(-Backdate)) || !c.NotAfter.Equal(want.Add(DefaultLifetime)) {
		t.Errorf("validity %s to %s", c.NotBefore, c.NotAfter)
	}
}

func TestIssueUser(t *testing.T) {
	a := newCA(t, "grid")
	k, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	c, err := a.Issue(Request{Role: User, Name: "alice@vu", Key: k.Public(), Lifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := AttributesOf(c)
	if err != nil || attrs.Role != User || attrs.Groups != nil {
		t.Errorf("%+v, %v", attrs, err)
	}
	if c.NotAfter.Sub(c.NotBefore) != time.Hour+Backdate {
		t.Errorf("lifetime %v", c.NotAfter.Sub(c.NotBefore))
	}
}

func TestIssueClampedToCA(t *testing.T) {
	a, err := New(Config{Name: "short", Lifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	c, err := a.Issue(Request{Role: Hub, Name: "hub1", Key: priv.Public()})
	if err != nil {
		t.Fatal(err)
	}
	if !c.NotAfter.Equal(a.Cert.NotAfter) {
		t.Errorf("NotAfter %s, CA's %s", c.NotAfter, a.Cert.NotAfter)
	}
	if _, err := a.Issue(Request{Role: Hub, Name: "late", Key: priv.Public(), Start: time.Now().Add(2 * time.Hour)}); err == nil {
		t.Error("certificate starting after the CA's end issued")
	}
}

func TestIssueRefuses(t *testing.T) {
	a := newCA(t, "grid")
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	many := make([]string, MaxGroups+1)
	for i := range many {
		many[i] = "g" + big.NewInt(int64(i)).String()
	}
	for name, r := range map[string]Request{
		"no role":     {Name: "x", Key: ed.Public()},
		"bad role":    {Role: "admin", Name: "x", Key: ed.Public()},
		"no name":     {Role: User, Key: ed.Public()},
		"bad name":    {Role: User, Name: "a b", Key: ed.Public()},
		"long name":   {Role: User, Name: string(bytes.Repeat([]byte("a"), 65)), Key: ed.Public()},
		"bad group":   {Role: User, Name: "x", Groups: []string{"-x"}, Key: ed.Public()},
		"many groups": {Role: User, Name: "x", Groups: many, Key: ed.Public()},
		"no key":      {Role: User, Name: "x"},
		"ecdsa node":  {Role: Node, Name: "x", Key: ec.Public()},
		"p224 user":   {Role: User, Name: "x", Key: p224.Public()},
		"ca key":      {Role: User, Name: "x", Key: a.Cert.PublicKey},
	} {
		if _, err := a.Issue(r); err == nil {
			t.Errorf("%s: issued", name)
		}
	}
}

func TestAttributesOf(t *testing.T) {
	a := newCA(t, "grid")
	// The CA's certificate has no role.
	if _, err := AttributesOf(a.Cert); err == nil {
		t.Error("CA certificate has attributes")
	}
}

func TestUpdateCRL(t *testing.T) {
	a := newCA(t, "grid")
	now := time.Now()
	l1, err := a.UpdateCRL(nil, CRLUpdate{Revoke: []*big.Int{big.NewInt(7)}, Now: now, Reason: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := l1.CheckSignatureFrom(a.Cert); err != nil {
		t.Fatal(err)
	}
	if l1.Number.Int64() != 1 || len(l1.RevokedCertificateEntries) != 1 || l1.RevokedCertificateEntries[0].ReasonCode != 1 {
		t.Fatalf("first list: number %v, %d entries", l1.Number, len(l1.RevokedCertificateEntries))
	}
	if got := l1.NextUpdate.Sub(now.UTC().Truncate(time.Second)); got != DefaultCRLLifetime {
		t.Errorf("next update after %v", got)
	}
	l2, err := a.UpdateCRL(l1, CRLUpdate{Revoke: []*big.Int{big.NewInt(7), big.NewInt(9)}, Lifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var serials []int64
	for _, e := range l2.RevokedCertificateEntries {
		serials = append(serials, e.SerialNumber.Int64())
	}
	if l2.Number.Int64() != 2 || !slices.Equal(serials, []int64{7, 9}) {
		t.Errorf("second list: number %v, serials %v", l2.Number, serials)
	}
	// Round trip through PEM.
	back, err := ParseCRL(EncodeCRL(l2))
	if err != nil || !bytes.Equal(back.Raw, l2.Raw) {
		t.Errorf("PEM round trip: %v", err)
	}
	if back, err := ParseCRL(l2.Raw); err != nil || back.Number.Int64() != 2 {
		t.Errorf("DER: %v", err)
	}
	if _, err := newCA(t, "other").UpdateCRL(l2, CRLUpdate{}); err == nil {
		t.Error("another CA's list extended")
	}
	if _, err := a.UpdateCRL(nil, CRLUpdate{Revoke: []*big.Int{big.NewInt(0)}}); err == nil {
		t.Error("serial 0 revoked")
	}
	if _, err := ParseCRL(append(EncodeCRL(l2), "junk"...)); err == nil {
		t.Error("trailing junk after a CRL accepted")
	}
}

func TestCertificatesPEM(t *testing.T) {
	a, b := newCA(t, "one"), newCA(t, "two")
	data := EncodeCertificates(a.Cert, b.Cert)
	got, err := ParseCertificates(data)
	if err != nil || len(got) != 2 || !got[0].Equal(a.Cert) || !got[1].Equal(b.Cert) {
		t.Fatalf("round trip: %v", err)
	}
	for name, bad := range map[string][]byte{
		"empty":    nil,
		"trailing": append(bytes.Clone(data), "junk"...),
		"crl":      append(bytes.Clone(data), []byte("-----BEGIN X509 CRL-----\nAA==\n-----END X509 CRL-----\n")...),
		"garbage":  []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
	} {
		if _, err := ParseCertificates(bad); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func TestNewSerial(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		s, err := NewSerial()
		if err != nil || s.Sign() <= 0 || s.BitLen() != 127 || seen[s.String()] {
			t.Fatalf("serial %v, %v", s, err)
		}
		seen[s.String()] = true
	}
}

func TestCheckCA(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	mk := func(mod func(*x509.Certificate), parent *x509.Certificate) *x509.Certificate {
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1), Subject: pkixName("x"), NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
		}
		mod(tmpl)
		if parent == nil {
			parent = tmpl
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), key)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return c
	}
	good := mk(func(*x509.Certificate) {}, nil)
	if err := CheckCA(good); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*x509.Certificate{
		"no CRL signing":  mk(func(c *x509.Certificate) { c.KeyUsage = x509.KeyUsageCertSign }, nil),
		"no cert signing": mk(func(c *x509.Certificate) { c.KeyUsage = x509.KeyUsageCRLSign }, nil),
		"not a CA":        mk(func(c *x509.Certificate) { c.IsCA = false }, nil),
		"not self-issued": mk(func(c *x509.Certificate) { c.Subject = pkixName("sub") }, good),
	} {
		if err := CheckCA(c); err == nil {
			t.Errorf("%s: accepted as a grid CA", name)
		}
	}
}

func pkixName(cn string) pkix.Name { return pkix.Name{CommonName: cn} }

// A hub's or node's certificate certifies only names a hub admits
// (identity.CheckName, issue 32): no dot (NAME.grid), '@', space,
// control character or the form of an ID. A user's CN stays a login
// name.
func TestIssueRefusesMachineNames(t *testing.T) {
	a := newCA(t, "grid")
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	id := identity.KeyFromSeed(make([]byte, 32)).ID().String()
	for name, r := range map[string]Request{
		"node NAME.grid":  {Role: Node, Name: "c.grid", Key: ed.Public()},
		"hub with @":      {Role: Hub, Name: "alice@vu", Key: ed.Public()},
		"node with +":     {Role: Node, Name: "a+b", Key: ed.Public()},
		"node ID":         {Role: Node, Name: id, Key: ed.Public()},
		"alias with dot":  {Role: Node, Name: "n1", Aliases: []string{"das3v.data"}, Key: ed.Public()},
		"alias of 64":     {Role: Hub, Name: "h", Aliases: []string{string(bytes.Repeat([]byte("a"), 64))}, Key: ed.Public()},
		"alias ID-shaped": {Role: Hub, Name: "h", Aliases: []string{strings.ToUpper(id)}, Key: ed.Public()},
	} {
		if _, err := a.Issue(r); !errors.Is(err, identity.ErrBadName) {
			t.Errorf("%s: %v, want a refusal naming the bad name", name, err)
		}
	}
	if _, err := a.Issue(Request{Role: Node, Name: "das3v-n1", Aliases: []string{"das3v-data", "N1_b"}, Key: ed.Public()}); err != nil {
		t.Errorf("a node certificate: %v", err)
	}
	if _, err := a.Issue(Request{Role: User, Name: "alice@vu", Key: ed.Public()}); err != nil {
		t.Errorf("a user's certificate: %v", err)
	}
}
