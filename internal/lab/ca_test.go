package lab

import (
	"crypto/x509"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"testing"

	"github.com/gridlink/gridlink/cli"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/chain"
)

// The lab CA is made once, certifies the keys it issues, keeps the layout
// of `gridlink ca init` (so `gridlink cert issue --dir` works on it), and
// its revocation list can be replaced.
func TestLabCA(t *testing.T) {
	old := StateDir
	StateDir = t.TempDir()
	t.Cleanup(func() { StateDir = old })

	c, err := OpenCA()
	if err != nil {
		t.Fatal(err)
	}
	again, err := OpenCA()
	if err != nil || !again.Authority.Cert.Equal(c.Authority.Cert) {
		t.Fatalf("a second OpenCA made another CA or failed: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(CADir(), "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ca.key: %v %v", fi, err)
	}
	trust, err := pki.LoadTrust(c.CertFile(), c.CRLFile())
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Issue(ca.Node, "das3v-n1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Issue(ca.Node, "das3v-n1")
	if err != nil {
		t.Fatal(err)
	}
	if a.Key == b.Key {
		t.Errorf("two issues share the key file %s", a.Key)
	}
	if len(a.Args()) != 8 || a.Args()[1] != c.CertFile() || a.Args()[3] != c.CRLFile() {
		t.Errorf("args %v", a.Args())
	}
	key, err := identity.LoadKey(a.Key)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(a.Cert)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := ca.ParseCertificates(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.Certified(key, certs, trust); err != nil {
		t.Errorf("the issued certificate: %v", err)
	}

	// the layout of gridlink ca init
	out := filepath.Join(t.TempDir(), "n.pem")
	cmd := cli.Root()
	cmd.SetArgs([]string{"cert", "issue", "--dir", CADir(), "--role", "node", "--name", "by-hand", "--key", filepath.Join(t.TempDir(), "n.key"), "--out", out})
	if err := cmd.Execute(); err != nil {
		t.Errorf("gridlink cert issue --dir %s: %v", CADir(), err)
	}

	crl, err := c.CRL()
	if err != nil {
		t.Fatal(err)
	}
	crl, err = c.Authority.UpdateCRL(crl, ca.CRLUpdate{Revoke: []*big.Int{certs[0].SerialNumber}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetCRL(crl); err != nil {
		t.Fatal(err)
	}
	if took, err := trust.Reload(); !took || err != nil {
		t.Fatalf("the new revocation list: %v %v", took, err)
	}
	if _, err := trust.VerifyCertificates([]*x509.Certificate{certs[0]}); !errors.Is(err, chain.ErrRevoked) {
		t.Errorf("a revoked certificate: %v", err)
	}
	other, err := ca.New(ca.Config{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.UpdateCRL(nil, ca.CRLUpdate{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetCRL(foreign); err == nil {
		t.Error("SetCRL took another CA's list")
	}
}
