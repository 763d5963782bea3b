package pki_test

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/chain"
	"github.com/gridlink/gridlink/pki/proxy"
)

// userOf makes an RSA user of a federation CA and its proxy chain.
func userOf(t *testing.T, f *fedCA, cn string) *proxy.Credential {
	t.Helper()
	k := rsaKey(t)
	return &proxy.Credential{Chain: []*x509.Certificate{f.issue(t, cn, &k.PublicKey, false)}, Key: k}
}

// TestTrustDirectory: a trust directory is read by its hashed names and
// kept fresh: a CA that arrives is trusted at the next reload, one that
// leaves is not (nor its list), a CRL that arrives revokes; files that do
// not parse are left out, named, and the rest taken.
func TestTrustDirectory(t *testing.T) {
	dir := t.TempDir()
	a, b := newFedCANamed(t, "A CA"), newFedCANamed(t, "B CA")
	writeFile(t, filepath.Join(dir, "aaaaaaaa.0"), ca.EncodeCertificates(a.cert), 0o644)
	writeFile(t, filepath.Join(dir, "aaaaaaaa.signing_policy"), []byte("not read"), 0o644)
	trust, err := pki.LoadTrustWith(dir, "", chain.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ua, ub := userOf(t, a, "Ann"), userOf(t, b, "Ben")
	if _, err := trust.VerifyCertificates(ua.Chain); err != nil {
		t.Fatalf("user of the directory's CA: %v", err)
	}
	if _, err := trust.VerifyCertificates(ub.Chain); !errors.Is(err, chain.ErrUnknownCA) {
		t.Fatalf("user of a CA not in the directory: %v", err)
	}
	if took, err := trust.Reload(); took || err != nil {
		t.Fatalf("reload of an unchanged directory: %v %v", took, err)
	}
	// b arrives with a list revoking ben, and a broken file.
	writeFile(t, filepath.Join(dir, "bbbbbbbb.0"), ca.EncodeCertificates(b.cert), 0o644)
	b.revoke(t, filepath.Join(dir, "bbbbbbbb.r0"), ub.Leaf())
	writeFile(t, filepath.Join(dir, "cccccccc.0"), []byte("junk"), 0o644)
	took, err := trust.Reload()
	if !took || err == nil || !strings.Contains(err.Error(), "cccccccc.0") {
		t.Fatalf("reload with b and a broken file: %v %v", took, err)
	}
	if _, err := trust.VerifyCertificates(ub.Chain); !errors.Is(err, chain.ErrRevoked) {
		t.Fatalf("ben, revoked by b's list: %v", err)
	}
	// a leaves.
	if err := os.Remove(filepath.Join(dir, "aaaaaaaa.0")); err != nil {
		t.Fatal(err)
	}
	if took, _ := trust.Reload(); !took {
		t.Fatal("a's removal not seen")
	}
	if _, err := trust.VerifyCertificates(ua.Chain); !errors.Is(err, chain.ErrUnknownCA) {
		t.Fatalf("user of a CA gone from the directory: %v", err)
	}
}

// TestTrustDirectoryCertifiesUsersOnly: a CA of the trust directory that
// issues a certificate in gridlink's layout for a hub (O=grid, OU=hub)
// certifies no hub: its certificates are users', named by their subject.
func TestTrustDirectoryCertifiesUsersOnly(t *testing.T) {
	dir := t.TempDir()
	f := newFedCA(t)
	writeFile(t, filepath.Join(dir, "aaaaaaaa.0"), ca.EncodeCertificates(f.cert), 0o644)
	trust, err := pki.LoadTrustWith(dir, "", chain.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// What a federation CA could issue: the grid's layout for a hub.
	a, err := ca.New(ca.Config{Name: "grid", Key: f.key})
	if err != nil {
		t.Fatal(err)
	}
	a.Cert = f.cert // signed by the federation CA's key, under its name
	k, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	hubCert, err := a.Issue(ca.Request{Role: ca.Hub, Name: "hubx", Key: k.Private().Public()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := trust.VerifyCertificates([]*x509.Certificate{hubCert})
	if err != nil {
		t.Fatal(err)
	}
	if res.Role != ca.User || res.Name != ca.SubjectDN(hubCert) || res.Groups != nil {
		t.Errorf("a federation CA's certificate proved %+v, want a user named by its subject", res.Attributes)
	}
	if _, err := pki.Certified(k, []*x509.Certificate{hubCert}, trust); err != nil {
		t.Fatal(err)
	}
}
