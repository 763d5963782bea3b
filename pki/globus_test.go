package pki_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/chain"
	"github.com/gridlink/gridlink/pki/keyfile"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
)

// The interop tests with the Globus tools (issue 34): Debian's
// globus-proxy-utils, globus-gridftp-server-progs and
// globus-gass-copy-progs, which `make deps` installs. Missing, the tests
// fail under CI and skip elsewhere.

func needGlobus(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			msg := fmt.Sprintf("%s missing: install the Debian packages globus-proxy-utils globus-gridftp-server-progs globus-gass-copy-progs openssl (make deps)", tool)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
}

// fedCA is a CA of the user's federation as grid CAs are: RSA, a DN of
// domain components, its users' certificates without gridlink's layout.
type fedCA struct {
	cert *x509.Certificate
	key  *rsa.PrivateKey
	dn   string // its subject as Globus writes it
	crl  int64  // the number of the last revocation list
}

var oidDC = asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 25}

func fedName(cn string) pkix.Name {
	return pkix.Name{ExtraNames: []pkix.AttributeTypeAndValue{{Type: oidDC, Value: "org"}, {Type: oidDC, Value: "fed"}, {Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: cn}}}
}

func rsaKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newFedCA(t *testing.T) *fedCA { return newFedCANamed(t, "Fed CA") }

func newFedCANamed(t *testing.T, cn string) *fedCA {
	t.Helper()
	k := rsaKey(t)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: fedName(cn), NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &fedCA{cert: c, key: k, dn: ca.SubjectDN(c)}
}

// issue certifies pub for cn: a user's (client) or a host's (server).
func (f *fedCA) issue(t *testing.T, cn string, pub crypto.PublicKey, host bool) *x509.Certificate {
	t.Helper()
	serial, _ := ca.NewSerial()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: fedName(cn), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(20 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	if host {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames, tmpl.IPAddresses = []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.cert, pub, f.key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c
}

// revoke writes the CA's revocation list, revoking certs, to path.
func (f *fedCA) revoke(t *testing.T, path string, certs ...*x509.Certificate) {
	t.Helper()
	f.crl++
	l := &x509.RevocationList{Number: big.NewInt(f.crl), ThisUpdate: time.Now().Add(-time.Minute), NextUpdate: time.Now().Add(24 * time.Hour)}
	for _, c := range certs {
		l.RevokedCertificateEntries = append(l.RevokedCertificateEntries, x509.RevocationListEntry{SerialNumber: c.SerialNumber, RevocationTime: time.Now().Add(-time.Minute)})
	}
	der, err := x509.CreateRevocationList(rand.Reader, l, f.cert, f.key)
	if err != nil {
		t.Fatal(err)
	}
	crl, _ := x509.ParseRevocationList(der)
	writeFile(t, path, ca.EncodeCRL(crl), 0o644)
}

// install puts a CA in a trust directory as grid hosts keep them:
// HASH.0 (openssl x509 -hash) and the signing policy Globus wants. It
// returns HASH.
func install(t *testing.T, dir string, c *x509.Certificate) string {
	t.Helper()
	pemFile := filepath.Join(t.TempDir(), "ca.pem")
	writeFile(t, pemFile, ca.EncodeCertificates(c), 0o644)
	out, err := exec.Command("openssl", "x509", "-hash", "-noout", "-in", pemFile).Output()
	if err != nil {
		t.Fatalf("openssl x509 -hash: %v", err)
	}
	hash := strings.TrimSpace(string(out))
	dn := ca.SubjectDN(c)
	writeFile(t, filepath.Join(dir, hash+".0"), ca.EncodeCertificates(c), 0o644)
	policy := fmt.Sprintf("access_id_CA X509 '%s'\npos_rights globus CA:sign\ncond_subjects globus '\"*\"'\n", dn)
	writeFile(t, filepath.Join(dir, hash+".signing_policy"), []byte(policy), 0o644)
	return hash
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

// globusEnv runs a Globus tool with the credentials and trust directory
// given in its environment; it returns its output and error.
func globusEnv(env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// gridProxyInit makes a proxy with grid-proxy-init of a user's
// certificate and key files (the key protected by pass, given on stdin).
func gridProxyInit(t *testing.T, certsDir, certFile, keyFile, pass string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "x509up")
	cmd := exec.Command("grid-proxy-init", "-debug", "-pwstdin", "-out", out)
	cmd.Env = append(os.Environ(), "X509_USER_CERT="+certFile, "X509_USER_KEY="+keyFile, "X509_CERT_DIR="+certsDir)
	cmd.Stdin = strings.NewReader(pass + "\n")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("grid-proxy-init: %v\n%s", err, b)
	}
	return out
}

// fedUser writes an RSA user certificate of f and its key, protected by
// pass in the PKCS #8 form gridlink writes, and returns the files.
func fedUser(t *testing.T, f *fedCA, cn, pass string) (cert *x509.Certificate, certFile, keyFile string) {
	t.Helper()
	k := rsaKey(t)
	cert = f.issue(t, cn, &k.PublicKey, false)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "usercert.pem"), filepath.Join(dir, "userkey.pem")
	writeFile(t, certFile, ca.EncodeCertificates(cert), 0o644)
	enc, err := keyfile.Encrypt(k, []byte(pass), keyfile.Cost{})
	if err != nil {
		t.Fatal(err)
	}
	if err := keyfile.Write(keyFile, enc); err != nil {
		t.Fatal(err)
	}
	return cert, certFile, keyFile
}

// handshake runs a gridlink handshake over loopback TCP between cli and
// srv; it returns both ends' errors and the peer the server saw.
func handshake(t *testing.T, cli, srv *pki.Credentials) (client, server error, peer pki.Peer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		peer pki.Peer
		err  error
	}
	done := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- res{err: err}
			return
		}
		defer c.Close()
		sc, err := srv.Server(ctx, c, nil)
		if err != nil {
			done <- res{err: err}
			return
		}
		_, err = io.ReadFull(sc, make([]byte, 2))
		done <- res{sc.Peer, err}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cc, err := cli.Client(ctx, conn, identity.ID{}, nil)
	if err == nil {
		if _, err = cc.Write([]byte("ok")); err == nil {
			err = cc.Verdict()
		}
	}
	r := <-done
	return err, r.err, r.peer
}

// TestGridProxyInitAccepted (issue 34): a proxy that grid-proxy-init
// made from an RSA user certificate of another CA, found in a trust
// directory (hashed names) with its revocation list, is accepted by a
// gridlink end, as the user's Globus subject; once the CA revokes the
// user and the directory's list changes, the end rereads it and refuses
// that proxy, both ends naming the revocation. grid-proxy-init read the
// user's key that gridlink encrypted (PKCS #8, issue 36).
func TestGridProxyInitAccepted(t *testing.T) {
	needGlobus(t, "openssl", "grid-proxy-init")
	fed := newFedCA(t)
	certs := t.TempDir()
	hash := install(t, certs, fed.cert)
	fed.revoke(t, filepath.Join(certs, hash+".r0"))
	_, aliceCert, aliceKey := fedUser(t, fed, "Alice Smith", "alice pw")
	_, bobCert, bobKey := fedUser(t, fed, "Bob Jones", "bob pw")
	aliceProxy := gridProxyInit(t, certs, aliceCert, aliceKey, "alice pw")
	bobProxy := gridProxyInit(t, certs, bobCert, bobKey, "bob pw")

	// The gridlink end: the grid's own CA (a node's certificate) and the
	// trust directory.
	g := pkitest.New(t, "grid")
	gdir := t.TempDir()
	g.WriteGrid(t, gdir)
	load := func() *pki.Trust {
		tr, err := pki.LoadTrustFiles(pki.TrustFiles{CA: filepath.Join(gdir, "ca.pem"), CRL: filepath.Join(gdir, "crl.pem"), Dir: certs}, chain.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	trust := load()
	key, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := pki.Certified(key, []*x509.Certificate{g.Cert(t, ca.Node, "site", key, time.Time{}, 0)}, trust)
	if err != nil {
		t.Fatal(err)
	}
	user := func(path string, tr *pki.Trust) *pki.Credentials {
		t.Helper()
		p, err := proxy.Load(path)
		if err != nil {
			t.Fatalf("reading grid-proxy-init's proxy: %v", err)
		}
		if _, ok := p.Key.(*rsa.PrivateKey); !ok {
			t.Fatalf("grid-proxy-init's proxy key is %T, want RSA", p.Key)
		}
		c, err := pki.FromProxy(p, tr)
		if err != nil {
			t.Fatalf("gridlink refused grid-proxy-init's proxy: %v", err)
		}
		return c
	}
	// A legacy proxy (grid-proxy-init -old: CN=proxy, no ProxyCertInfo)
	// is refused by name.
	legacyFile := filepath.Join(t.TempDir(), "x509up_old")
	if out, err := globusEnv([]string{"X509_USER_CERT=" + aliceCert, "X509_USER_KEY=" + aliceKey, "X509_CERT_DIR=" + certs},
		"sh", "-c", "echo 'alice pw' | grid-proxy-init -old -pwstdin -out "+legacyFile); err != nil {
		t.Fatalf("grid-proxy-init -old: %v\n%s", err, out)
	}
	legacy, err := proxy.Load(legacyFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trust.VerifyCertificates(legacy.Chain); !errors.Is(err, chain.ErrNotProxy) || !strings.Contains(err.Error(), "is a legacy Globus proxy (CN=proxy, before RFC 3820)") {
		t.Errorf("legacy proxy: %v", err)
	}
	if _, err := pki.FromProxy(legacy, trust); err == nil || !strings.Contains(err.Error(), "legacy Globus proxy") {
		t.Errorf("a node of a legacy proxy: %v", err)
	}

	cerr, serr, peer := handshake(t, user(aliceProxy, load()), srv)
	if cerr != nil || serr != nil {
		t.Fatalf("alice's grid-proxy-init proxy: client %v, server %v", cerr, serr)
	}
	if peer.Chain == nil || peer.Chain.Name != "/DC=org/DC=fed/CN=Alice Smith" || peer.Chain.Role != ca.User || peer.Chain.Proxies != 2 || peer.Chain.CA.Subject.String() != fed.cert.Subject.String() {
		t.Fatalf("alice proved %+v", peer.Chain)
	}

	// The federation CA revokes bob: its list in the trust directory
	// changes, and the end takes it on its next poll.
	bobClient := user(bobProxy, load())
	if cerr, serr, _ := handshake(t, bobClient, srv); cerr != nil || serr != nil {
		t.Fatalf("bob before his revocation: client %v, server %v", cerr, serr)
	}
	bob, _ := proxy.Load(bobProxy)
	fed.revoke(t, filepath.Join(certs, hash+".r0"), bob.Chain[len(bob.Chain)-1])
	if took, err := trust.Reload(); !took || err != nil {
		t.Fatalf("trust directory not reread: %v %v", took, err)
	}
	cerr, serr, _ = handshake(t, bobClient, srv)
	if !errors.Is(serr, pki.ErrDenied) || !strings.Contains(serr.Error(), "end-entity certificate /DC=org/DC=fed/CN=Bob Jones: revoked: serial") {
		t.Errorf("server on bob's revoked proxy: %v", serr)
	}
	var de *pki.DeniedError
	if !errors.As(cerr, &de) || !de.ByPeer || !strings.Contains(cerr.Error(), "revoked") {
		t.Errorf("client with bob's revoked proxy: %v", cerr)
	}
	if err := trust.Recheck(peer); err != nil {
		t.Errorf("alice, rechecked after bob's revocation: %v", err)
	}
}
