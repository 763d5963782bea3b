package pki_test

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/keyfile"
	"github.com/gridlink/gridlink/pki/proxy"
)

// gridFTP is a GSI GridFTP server on loopback: its host certificate from
// the federation CA, the trust directory, a grid-mapfile mapping subjects
// to this test's account.
type gridFTP struct {
	port int
	log  string
}

func startGridFTP(t *testing.T, fed *fedCA, certs string, subjects ...string) *gridFTP {
	t.Helper()
	dir := t.TempDir()
	k := rsaKey(t)
	host := fed.issue(t, "localhost", &k.PublicKey, true)
	certFile, keyFile := filepath.Join(dir, "hostcert.pem"), filepath.Join(dir, "hostkey.pem")
	writeFile(t, certFile, ca.EncodeCertificates(host), 0o644)
	kb, err := keyfile.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, keyFile, kb, 0o600)
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	var mapfile bytes.Buffer
	for _, s := range subjects {
		fmt.Fprintf(&mapfile, "%q %s\n", s, me.Username)
	}
	mapPath := filepath.Join(dir, "grid-mapfile")
	writeFile(t, mapPath, mapfile.Bytes(), 0o644)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &gridFTP{port: port, log: filepath.Join(dir, "gridftp.log")}
	args := []string{"-p", fmt.Sprint(port), "-control-interface", "127.0.0.1", "-data-interface", "127.0.0.1", "-d", "all", "-l", s.log}
	if os.Geteuid() == 0 {
		args = append(args, "-allow-root")
	}
	cmd := exec.Command("globus-gridftp-server", args...)
	cmd.Env = append(os.Environ(), "X509_USER_CERT="+certFile, "X509_USER_KEY="+keyFile, "X509_CERT_DIR="+certs, "GRIDMAP="+mapPath)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(s.log)
			t.Logf("globus-gridftp-server output:\n%s\nlog:\n%s", out.String(), b)
		}
	})
	testwait.Until(t, "globus-gridftp-server to listen", 20*time.Second, func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return s
}

// get copies path from the server to a local file with globus-url-copy,
// authenticating with the proxy file, and returns what arrived.
func (s *gridFTP) get(t *testing.T, certs, proxyFile, path string) ([]byte, string, error) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	out, err := globusEnv([]string{"X509_USER_PROXY=" + proxyFile, "X509_CERT_DIR=" + certs},
		"globus-url-copy", fmt.Sprintf("gsiftp://127.0.0.1:%d%s", s.port, path), "file://"+dst)
	if err != nil {
		return nil, out, err
	}
	b, err := os.ReadFile(dst)
	return b, out, err
}

// TestGridFTPAcceptsGridlinkProxy (issue 34): a proxy gridlink made (the
// user certificate its CA issued, ECDSA P-256; `gridlink proxy init`'s
// proxy) is accepted by the Globus tools: grid-proxy-info reads it, a GSI
// GridFTP server on loopback admits it as the user's subject and carries
// a transfer with it; grid-proxy-init makes a proxy of the gridlink
// user certificate and its passphrase-protected key. A proxy of a user
// the grid-mapfile does not list is refused by the server.
func TestGridFTPAcceptsGridlinkProxy(t *testing.T) {
	needGlobus(t, "openssl", "grid-proxy-init", "grid-proxy-info", "globus-gridftp-server", "globus-url-copy")
	fed := newFedCA(t)
	certs := t.TempDir()
	install(t, certs, fed.cert)
	grid, err := ca.New(ca.Config{Name: "grid"})
	if err != nil {
		t.Fatal(err)
	}
	install(t, certs, grid.Cert)
	user := func(name string) *proxy.Credential {
		k, err := ca.NewUserKey()
		if err != nil {
			t.Fatal(err)
		}
		c, err := grid.Issue(ca.Request{Role: ca.User, Name: name, Key: k.Public()})
		if err != nil {
			t.Fatal(err)
		}
		return &proxy.Credential{Chain: []*x509.Certificate{c}, Key: k}
	}
	alice, mallory := user("alice"), user("mallory")
	srv := startGridFTP(t, fed, certs, ca.SubjectDN(alice.Leaf()))
	src := filepath.Join(t.TempDir(), "data")
	want := bytes.Repeat([]byte("gridlink to GridFTP\n"), 4096)
	writeFile(t, src, want, 0o644)

	for _, u := range []struct {
		name string
		cred *proxy.Credential
	}{{"alice", alice}, {"mallory", mallory}} {
		p, err := proxy.New(u.cred, proxy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "x509up_"+u.name)
		if err := proxy.Save(file, p); err != nil {
			t.Fatal(err)
		}
		out, err := globusEnv([]string{"X509_CERT_DIR=" + certs}, "grid-proxy-info", "-file", file, "-all")
		if err != nil || !strings.Contains(out, "identity : /O=grid/OU=user/CN="+u.name) || !strings.Contains(out, "type     : RFC 3820 compliant impersonation proxy") {
			t.Errorf("grid-proxy-info on %s's gridlink proxy: %v\n%s", u.name, err, out)
		}
		got, out, err := srv.get(t, certs, file, src)
		switch {
		case u.name == "alice" && (err != nil || !bytes.Equal(got, want)):
			t.Errorf("globus-url-copy with alice's gridlink proxy: %v (%d bytes of %d)\n%s", err, len(got), len(want), out)
		case u.name == "mallory" && err == nil:
			t.Errorf("the GridFTP server served mallory, whom its grid-mapfile does not list:\n%s", out)
		}
	}
	if b, _ := os.ReadFile(srv.log); !bytes.Contains(b, []byte("USER="+currentUser(t))) || !bytes.Contains(b, []byte("/O=grid/OU=user/CN=alice")) {
		t.Errorf("the server's log does not show alice's transfer:\n%s", b)
	}

	// grid-proxy-init of the gridlink user certificate and its key, as
	// `gridlink cert issue` writes it (encrypted PKCS #8).
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "usercert.pem"), filepath.Join(dir, "userkey.pem")
	writeFile(t, certFile, ca.EncodeCertificates(alice.Leaf()), 0o644)
	enc, err := keyfile.Encrypt(alice.Key, []byte("alice pw"), keyfile.Cost{})
	if err != nil {
		t.Fatal(err)
	}
	if err := keyfile.Write(keyFile, enc); err != nil {
		t.Fatal(err)
	}
	gp := gridProxyInit(t, certs, certFile, keyFile, "alice pw")
	if got, out, err := srv.get(t, certs, gp, src); err != nil || !bytes.Equal(got, want) {
		t.Errorf("globus-url-copy with grid-proxy-init's proxy of the gridlink certificate: %v\n%s", err, out)
	}
}

func currentUser(t *testing.T) string {
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return me.Username
}
