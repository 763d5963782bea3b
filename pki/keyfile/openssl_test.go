package keyfile

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// needTool finds a program the interop tests run: missing, they fail
// under CI (make deps installs it) and skip elsewhere.
func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s missing: install the Debian package %s (make deps)", name, pkg)
		}
		t.Skipf("%s missing (Debian package %s)", name, pkg)
	}
	return p
}

func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// TestEncryptedKeyOpenSSLReads: a passphrase-protected key gridlink
// writes is standard encrypted PKCS #8, which `openssl pkey` opens with
// the passphrase to the same key (issue 36: grid tools read the user's
// key file).
func TestEncryptedKeyOpenSSLReads(t *testing.T) {
	openssl := needTool(t, "openssl", "openssl")
	dir := t.TempDir()
	for name, k := range keys(t) {
		b, err := Encrypt(k, []byte("x"), Cost{})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("-----BEGIN ENCRYPTED PRIVATE KEY-----")) {
			t.Fatalf("%s: not an encrypted PKCS #8 block:\n%s", name, b)
		}
		path := filepath.Join(dir, name+".pem")
		if err := Write(path, b); err != nil {
			t.Fatal(err)
		}
		pub := run(t, openssl, "pkey", "-in", path, "-passin", "pass:x", "-pubout", "-outform", "DER")
		want, _ := x509.MarshalPKIXPublicKey(k.Public())
		if !bytes.Equal(pub, want) {
			t.Errorf("%s: openssl read another key", name)
		}
		if out, err := exec.Command(openssl, "pkey", "-in", path, "-passin", "pass:wrong", "-noout").CombinedOutput(); err == nil {
			t.Errorf("%s: openssl opened it with a wrong passphrase:\n%s", name, out)
		}
	}
}

// TestReadsOpenSSLKeys: the keys grid users have (RSA userkey.pem as
// OpenSSL writes it, traditional encrypted PEM or encrypted PKCS #8
// with PBKDF2), and gridlink's older format, are read with their
// passphrase; a wrong one is ErrPassphrase.
func TestReadsOpenSSLKeys(t *testing.T) {
	openssl := needTool(t, "openssl", "openssl")
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.pem")
	run(t, openssl, "genrsa", "-out", plain, "2048")
	files := map[string]string{
		"traditional":  filepath.Join(dir, "trad.pem"),
		"pkcs8-pbkdf2": filepath.Join(dir, "p8.pem"),
		"pkcs8-scrypt": filepath.Join(dir, "p8s.pem"),
	}
	run(t, openssl, "rsa", "-in", plain, "-aes256", "-traditional", "-passout", "pass:pw", "-out", files["traditional"])
	run(t, openssl, "pkcs8", "-topk8", "-in", plain, "-v2", "aes-256-cbc", "-passout", "pass:pw", "-out", files["pkcs8-pbkdf2"])
	run(t, openssl, "pkcs8", "-topk8", "-in", plain, "-scrypt", "-passout", "pass:pw", "-out", files["pkcs8-scrypt"])
	k0, err := Load(plain, nil)
	if err != nil {
		t.Fatalf("plain RSA key: %v", err)
	}
	if _, ok := k0.(*rsa.PrivateKey); !ok {
		t.Fatalf("plain key %T", k0)
	}
	old, err := sealLegacy(k0, []byte("pw"), cheap)
	if err != nil {
		t.Fatal(err)
	}
	files["gridlink-legacy"] = filepath.Join(dir, "legacy.pem")
	if err := Write(files["gridlink-legacy"], old); err != nil {
		t.Fatal(err)
	}
	for name, path := range files {
		if err := os.Chmod(path, 0o600); err != nil {
			t.Fatal(err)
		}
		k, err := Load(path, func() ([]byte, error) { return []byte("pw"), nil })
		if err != nil || !same(k, k0) {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := Load(path, func() ([]byte, error) { return []byte("wrong"), nil }); !errors.Is(err, ErrPassphrase) {
			t.Errorf("%s: wrong passphrase: %v, want ErrPassphrase", name, err)
		}
	}
}
