// Package pkitest makes grids for tests: a CA, certified hubs, nodes,
// users and proxies, and the outsiders a grid must refuse (another grid's
// certificate, an expired one, a revoked one, a tampered chain, a proxy
// past its lifetime, a proxy signed by the wrong user, a self-signed
// certificate). It also writes them as the files the command line reads.
package pkitest

import (
	"crypto/ed25519"
	"crypto/x509"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/chain"
	"github.com/gridlink/gridlink/pki/proxy"
)

// Grid is a test grid: its CA, the trust its members share and the
// revocation list in force.
type Grid struct {
	CA    *ca.Authority
	Trust *pki.Trust
	CRL   *x509.RevocationList
}

// New makes a grid named name.
func New(t testing.TB, name string) *Grid {
	t.Helper()
	a, err := ca.New(ca.Config{Name: name, Start: time.Now().Add(-48 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	crl, err := a.UpdateCRL(nil, ca.CRLUpdate{})
	if err != nil {
		t.Fatal(err)
	}
	trust, err := pki.NewTrust(chain.Config{Roots: []*x509.Certificate{a.Cert}, CRLs: []*x509.RevocationList{crl}})
	if err != nil {
		t.Fatal(err)
	}
	return &Grid{CA: a, Trust: trust, CRL: crl}
}

// Cert issues a hub's or node's certificate for key.
func (g *Grid) Cert(t testing.TB, role ca.Role, name string, key identity.Key, start time.Time, life time.Duration) *x509.Certificate {
	t.Helper()
	c, err := g.CA.Issue(ca.Request{Role: role, Name: name, Key: key.Private().Public(), Start: start, Lifetime: life})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Member makes the credentials of a hub or node of the grid.
func (g *Grid) Member(t testing.TB, role ca.Role, name string) *pki.Credentials {
	t.Helper()
	key := newKey(t)
	creds, err := pki.Certified(key, []*x509.Certificate{g.Cert(t, role, name, key, time.Time{}, 0)}, g.Trust)
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

// User makes a user's certificate and key, valid from a day ago.
func (g *Grid) User(t testing.TB, name string, groups ...string) *proxy.Credential {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := g.CA.Issue(ca.Request{Role: ca.User, Name: name, Groups: groups, Key: priv.Public(), Start: time.Now().Add(-24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return &proxy.Credential{Chain: []*x509.Certificate{c}, Key: priv}
}

// Proxy makes a proxy of user and returns node credentials whose identity
// key is the proxy's.
func (g *Grid) Proxy(t testing.TB, user *proxy.Credential, o proxy.Options) *pki.Credentials {
	t.Helper()
	p, err := proxy.New(user, o)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := pki.Certified(ProxyKey(t, p), p.Chain, g.Trust)
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

// ProxyFor makes a proxy of user valid for life and the node
// credentials of its key.
func (g *Grid) ProxyFor(t testing.TB, user *proxy.Credential, life time.Duration) (*proxy.Credential, *pki.Credentials) {
	t.Helper()
	p, err := proxy.New(user, proxy.Options{Lifetime: life})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := pki.FromProxy(p, g.Trust)
	if err != nil {
		t.Fatal(err)
	}
	return p, creds
}

// Renewed is a chain of issuer's for p's key, valid for life: what
// `gridlink proxy init` writes over p (pki.Credentials.Renew takes it).
func Renewed(t testing.TB, issuer, p *proxy.Credential, life time.Duration) []*x509.Certificate {
	t.Helper()
	cert, err := proxy.Issue(issuer, p.Key.Public(), proxy.Options{Lifetime: life})
	if err != nil {
		t.Fatal(err)
	}
	return append([]*x509.Certificate{cert}, issuer.Chain...)
}

// ProxyKey is a proxy's key as an identity key.
func ProxyKey(t testing.TB, p *proxy.Credential) identity.Key {
	t.Helper()
	k, err := pki.ProxyKey(p)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Revoke revokes cert and installs the new list in the grid's trust.
func (g *Grid) Revoke(t testing.TB, cert *x509.Certificate) {
	t.Helper()
	crl, err := g.CA.UpdateCRL(g.CRL, ca.CRLUpdate{Revoke: []*big.Int{cert.SerialNumber}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Trust.SetCRL(crl); err != nil {
		t.Fatal(err)
	}
	g.CRL = crl
}

func newKey(t testing.TB) identity.Key {
	t.Helper()
	k, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Outsider is a node the grid must refuse, and the reason it must give.
type Outsider struct {
	Case  string // what is wrong, in words
	Creds *pki.Credentials
	Chain []*x509.Certificate
	Want  error // the chain error (package chain's sentinels) the grid refuses it with
}

// Outsiders makes one node for each way of not belonging to g.
func (g *Grid) Outsiders(t testing.TB) []Outsider {
	t.Helper()
	var out []Outsider
	add := func(what string, key identity.Key, ch []*x509.Certificate, want error) {
		out = append(out, Outsider{Case: what, Creds: pki.Unchecked(key, ch, g.Trust), Chain: ch, Want: want})
	}
	other := New(t, "othergrid")
	k := newKey(t)
	add("a certificate from another CA", k, []*x509.Certificate{other.Cert(t, ca.Node, "intruder", k, time.Time{}, 0)}, chain.ErrUnknownCA)

	k = newKey(t)
	add("an expired certificate", k, []*x509.Certificate{g.Cert(t, ca.Node, "expired", k, time.Now().Add(-30*time.Hour), 24*time.Hour)}, chain.ErrExpired)

	k = newKey(t)
	revoked := g.Cert(t, ca.Node, "revoked", k, time.Time{}, 0)
	g.Revoke(t, revoked)
	add("a revoked certificate", k, []*x509.Certificate{revoked}, chain.ErrRevoked)

	k = newKey(t)
	good := g.Cert(t, ca.Node, "tampered", k, time.Time{}, 0)
	der := append([]byte(nil), good.Raw...)
	der[len(der)-5] ^= 0x40 // in the signature
	tampered, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	add("a tampered chain", k, []*x509.Certificate{tampered}, chain.ErrSignature)

	alice := g.User(t, "alice")
	old, err := proxy.New(alice, proxy.Options{Start: time.Now().Add(-3 * time.Hour), Lifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	add("a proxy past its lifetime", ProxyKey(t, old), old.Chain, chain.ErrExpired)

	mallory := g.User(t, "mallory")
	forged, err := proxy.New(mallory, proxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// mallory's proxy, presented as alice's.
	add("a proxy signed by the wrong user", ProxyKey(t, forged), []*x509.Certificate{forged.Chain[0], alice.Chain[0]}, chain.ErrIssuer)

	k = newKey(t)
	self, err := pki.NewCredentials(k)
	if err != nil {
		t.Fatal(err)
	}
	selfCert, err := x509.ParseCertificate(self.Certificate().Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	add("no certificate from the grid (self-signed)", k, []*x509.Certificate{selfCert}, chain.ErrUnknownCA)
	return out
}

// Files are the command line's files of one hub, node or outsider.
type Files struct {
	Key, Cert, Proxy string // --key and --cert, or --proxy
}

// Args are the command line flags for f with the grid files in dir.
func (f Files) Args(dir string) []string {
	args := []string{"--ca", filepath.Join(dir, "ca.pem"), "--crl", filepath.Join(dir, "crl.pem")}
	if f.Proxy != "" {
		return append(args, "--proxy", f.Proxy)
	}
	return append(args, "--key", f.Key, "--cert", f.Cert)
}

// WriteGrid writes the grid's ca.pem and crl.pem into dir.
func (g *Grid) WriteGrid(t testing.TB, dir string) {
	t.Helper()
	write(t, filepath.Join(dir, "ca.pem"), ca.EncodeCertificates(g.CA.Cert))
	write(t, filepath.Join(dir, "crl.pem"), ca.EncodeCRL(g.CRL))
}

// WriteCreds writes a key and chain as name.key and name.pem in dir.
func WriteCreds(t testing.TB, dir, name string, key identity.Key, ch []*x509.Certificate) Files {
	t.Helper()
	f := Files{Key: filepath.Join(dir, name+".key"), Cert: filepath.Join(dir, name+".pem")}
	if err := key.Save(f.Key); err != nil {
		t.Fatal(err)
	}
	write(t, f.Cert, ca.EncodeCertificates(ch...))
	return f
}

// WriteProxy writes a proxy credential file name.proxy in dir.
func WriteProxy(t testing.TB, dir, name string, p *proxy.Credential) Files {
	t.Helper()
	f := Files{Proxy: filepath.Join(dir, name+".proxy")}
	if err := proxy.Save(f.Proxy, p); err != nil {
		t.Fatal(err)
	}
	return f
}

func write(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
