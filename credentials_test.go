package gridlink

import (
	"bytes"
	"crypto/x509"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/chain"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
)

// Without the testing aid a bad chain stops the process up front; with
// it the chain is presented as it is, judged by --ca's trust, or, without
// --ca, by no one.
func TestUncheckedCredentials(t *testing.T) {
	dir := t.TempDir()
	g := pkitest.New(t, "testgrid")
	var expired pkitest.Outsider
	for _, o := range g.Outsiders(t) {
		if errors.Is(o.Want, chain.ErrExpired) && o.Chain[0].Subject.CommonName == "expired" {
			expired = o
		}
	}
	if expired.Creds == nil {
		t.Fatal("no expired outsider")
	}
	g.WriteGrid(t, dir)
	files := pkitest.WriteCreds(t, dir, "expired", expired.Creds.Key, expired.Chain)
	key, err := identity.LoadKey(files.Key)
	if err != nil {
		t.Fatal(err)
	}
	caFile, crlFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "crl.pem")

	sf := Credentials{CA: caFile, CRL: crlFile, Cert: files.Cert}
	if _, _, err := sf.Load(key); !errors.Is(err, chain.ErrExpired) {
		t.Errorf("an expired certificate without the testing aid: %v, want refused as expired", err)
	}
	sf.unchecked = true
	creds, trust, err := sf.Load(key)
	if err != nil || trust == nil || creds.Trust() != trust {
		t.Fatalf("the testing aid with --ca: %v (trust %v)", err, trust)
	}
	if got := creds.Certificate().Certificate[0]; !bytes.Equal(got, expired.Chain[0].Raw) {
		t.Error("the testing aid does not present the chain of --cert")
	}

	// a hub that presents a grid hub's certificate and admits anyone
	hubCert := g.Cert(t, ca.Hub, "hub", key, time.Time{}, 0)
	hubFiles := pkitest.WriteCreds(t, dir, "hub", key, []*x509.Certificate{hubCert})
	open := Credentials{Cert: hubFiles.Cert, unchecked: true}
	creds, trust, err = open.Load(key)
	if err != nil || trust != nil || creds.Trust() != nil {
		t.Fatalf("the testing aid without --ca: %v (trust %v)", err, trust)
	}
	if got := creds.Certificate().Certificate[0]; !bytes.Equal(got, hubCert.Raw) {
		t.Error("the testing aid without --ca does not present the chain of --cert")
	}
	open.unchecked = false
	if _, _, err := open.Load(key); !errors.Is(err, ErrCertWithoutCA) {
		t.Errorf("a certificate without the CA: %v", err)
	}
	if _, _, err := (Credentials{CRL: crlFile}).Load(key); !errors.Is(err, ErrCRLWithoutCA) {
		t.Errorf("a revocation list without the CA: %v", err)
	}
}

// A node's MaxProxyLifetime (--max-proxy-lifetime) bounds the proxies it
// admits: 7 days by default (zero), the reason named.
func TestMaxProxyLifetime(t *testing.T) {
	dir := t.TempDir()
	g := pkitest.New(t, "testgrid")
	g.WriteGrid(t, dir)
	long, err := proxy.New(g.User(t, "alice"), proxy.Options{Lifetime: 10 * 24 * time.Hour, MaxLifetime: -1})
	if err != nil {
		t.Fatal(err)
	}
	key, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	files := pkitest.WriteCreds(t, dir, "n1", key, []*x509.Certificate{g.Cert(t, ca.Node, "n1", key, time.Time{}, 0)})
	for _, tc := range []struct {
		max time.Duration
		ok  bool
	}{{0, false}, {chain.DefaultMaxProxyLifetime, false}, {30 * 24 * time.Hour, true}} {
		sf := Credentials{CA: filepath.Join(dir, "ca.pem"), CRL: filepath.Join(dir, "crl.pem"), Cert: files.Cert, MaxProxyLifetime: tc.max}
		_, trust, err := sf.Load(key)
		if err != nil {
			t.Fatal(err)
		}
		_, verr := trust.VerifyCertificates(long.Chain)
		switch {
		case tc.ok && verr != nil:
			t.Errorf("--max-proxy-lifetime %v: a 10-day proxy refused: %v", tc.max, verr)
		case !tc.ok && (!errors.Is(verr, chain.ErrLifetime) || !strings.Contains(verr.Error(), "longer than the 168h0m0s a proxy may be")):
			t.Errorf("--max-proxy-lifetime %v: a 10-day proxy: %v; want refused as too long", tc.max, verr)
		}
	}
}
