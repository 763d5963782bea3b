package dashboard

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
)

// Members need a grid: a dashboard of an open grid refuses to open to
// them; from files (the command line's --ca, --crl, --key, --cert) it
// presents the node's certificate. "dashboard" is a restriction proxy
// init accepts.
func TestMembersConfig(t *testing.T) {
	if _, err := New(Config{Hubs: []string{}, Members: MembersConfig{Listen: "127.0.0.1:0"}}); !errors.Is(err, ErrMembersNeedGrid) {
		t.Errorf("members in an open grid: %v; want ErrMembersNeedGrid", err)
	}
	g := pkitest.New(t, "testgrid")
	dir := t.TempDir()
	g.WriteGrid(t, dir)
	key, _ := identity.NewKey()
	files := pkitest.WriteCreds(t, dir, "dashnode", key, []*x509.Certificate{g.Cert(t, ca.Node, "dashnode", key, time.Time{}, 0)})
	log := &syncBuffer{}
	s, err := New(Config{Control: "@gridlink-dash-test-none", Hubs: []string{}, Logger: slog.New(slog.NewTextHandler(log, nil)),
		Copy: gridlink.CopyConfig{Node: gridlink.Config{KeyFile: files.Key, Credentials: gridlink.Credentials{
			CA: filepath.Join(dir, "ca.pem"), CRL: filepath.Join(dir, "crl.pem"), Cert: files.Cert}}},
		Members: MembersConfig{Listen: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	d := &memberDash{s: s, log: log, grid: g, self: pki.Unchecked(key, nil, nil)}
	if code, body := d.get(t, d.member(t, userCert(g.User(t, "alice"))), "/api/state"); code != http.StatusOK {
		t.Errorf("alice at a dashboard configured by files: %d %q", code, body)
	}
	mark := len(log.String())
	code, body := d.get(t, d.member(t, nil), "/api/state")
	d.refusedBoth(t, "no certificate", code, body, RefusedNoCert, mark)
	if !strings.HasPrefix(s.MembersURL(), "https://127.0.0.1:") {
		t.Errorf("MembersURL %q", s.MembersURL())
	}
	for _, e := range []string{"dashboard", "dashboard@" + key.ID().String()} {
		if err := gridlink.CheckRestriction(e); err != nil {
			t.Errorf("CheckRestriction(%q): %v", e, err)
		}
	}
}

// For browsers, the listener presents another certificate (an ECDSA one
// naming the host, as a web server's), and admits users' certificates
// for ECDSA keys, which browsers sign with, by the grid's CA all the same.
func TestMembersBrowserCertificate(t *testing.T) {
	g := pkitest.New(t, "testgrid")
	dir := t.TempDir()
	hostKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "frontend"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, hostKey.Public(), hostKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(hostKey)
	certFile, keyFile := filepath.Join(dir, "host.pem"), filepath.Join(dir, "host.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	s, err := New(Config{Control: "@gridlink-dash-test-none", Hubs: []string{}, Logger: slog.New(slog.NewTextHandler(log, nil)),
		Members: MembersConfig{Listen: "127.0.0.1:0", Creds: g.Member(t, ca.Node, "dashnode"), CertFile: certFile, KeyFile: keyFile}})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	host, _ := x509.ParseCertificate(der)
	roots := x509.NewCertPool()
	roots.AddCert(host)
	browser := func(cert *tls.Certificate) *http.Client {
		cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13} // the host's certificate, checked as a browser does
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		tr := &http.Transport{TLSClientConfig: cfg}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	d := &memberDash{s: s, log: log, grid: g}
	erinKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	erin, err := g.CA.Issue(ca.Request{Role: ca.User, Name: "erin", Key: erinKey.Public(), Start: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	code, page := d.get(t, browser(&tls.Certificate{Certificate: [][]byte{erin.Raw}, PrivateKey: erinKey}), "/")
	if code != http.StatusOK || !strings.Contains(page, "signed on as CN=erin,OU=user,O=testgrid") {
		t.Errorf("erin (ECDSA) at the host's certificate: %d %q", code, page)
	}
	if code, body := d.get(t, browser(userCert(g.User(t, "alice"))), "/api/state"); code != http.StatusOK {
		t.Errorf("alice (Ed25519): %d %q", code, body)
	}
	mark := len(log.String())
	code, body := d.get(t, browser(nil), "/")
	d.refusedBoth(t, "a browser without a certificate", code, body, RefusedNoCert, mark)
}
