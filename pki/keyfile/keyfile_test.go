package keyfile

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cheap keeps the tests fast; DefaultCost is for people.
var cheap = Cost{LogN: minLogN, R: 8, P: 1}

func keys(t *testing.T) map[string]crypto.Signer {
	t.Helper()
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]crypto.Signer{"ed25519": ed, "p256": p256, "p384": p384}
}

func same(a, b crypto.Signer) bool {
	return a.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(b.Public())
}

func TestPlainRoundTrip(t *testing.T) {
	for name, k := range keys(t) {
		b, err := Marshal(k)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := Parse(b)
		if err != nil || !same(got, k) {
			t.Fatalf("%s: Parse = %v, %v", name, got, err)
		}
		if Encrypted(b) {
			t.Errorf("%s: plain key reported encrypted", name)
		}
	}
}

func TestEncryptRoundTrip(t *testing.T) {
	pass := []byte("correct horse battery staple")
	for name, k := range keys(t) {
		b, err := Encrypt(k, pass, cheap)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !Encrypted(b) || bytes.Contains(b, []byte("BEGIN "+TypePlain)) {
			t.Fatalf("%s: not an encrypted block:\n%s", name, b)
		}
		got, err := Decrypt(b, pass)
		if err != nil || !same(got, k) {
			t.Fatalf("%s: Decrypt = %v, %v", name, got, err)
		}
		if _, err := Decrypt(b, []byte("wrong")); !errors.Is(err, ErrPassphrase) {
			t.Errorf("%s: wrong passphrase: %v, want ErrPassphrase", name, err)
		}
		if _, err := Parse(b); err == nil || !strings.Contains(err.Error(), "passphrase-protected") {
			t.Errorf("%s: Parse of an encrypted key: %v", name, err)
		}
	}
}

func TestEncryptRefuses(t *testing.T) {
	k := keys(t)["ed25519"]
	if _, err := Encrypt(k, nil, cheap); err == nil {
		t.Error("empty passphrase accepted")
	}
	for _, c := range []Cost{{LogN: 9, R: 8, P: 1}, {LogN: 23, R: 8, P: 1}, {LogN: 22, R: 8, P: 1}, {LogN: 10, R: 0, P: 1}, {LogN: 10, R: 8, P: 17}} {
		if _, err := Encrypt(k, []byte("x"), c); err == nil {
			t.Errorf("cost %+v accepted", c)
		}
	}
	p224, err := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Encrypt(p224, []byte("x"), cheap); err == nil {
		t.Error("P-224 key accepted")
	}
	if _, err := Marshal(p224); err == nil {
		t.Error("P-224 key marshalled")
	}
}

// TestDecryptTampered: every byte of a sealed file of the older format is
// covered: the header as additional data, the rest by the tag.
func TestDecryptTampered(t *testing.T) {
	pass := []byte("pw")
	b, err := sealLegacy(keys(t)["ed25519"], pass, cheap)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	for _, i := range []int{0, 1, 2, 3, 4, 4 + saltSize, headerSize, len(blk.Bytes) - 1} {
		mod := bytes.Clone(blk.Bytes)
		mod[i] ^= 1
		_, err := Decrypt(pem.EncodeToMemory(&pem.Block{Type: TypeEncrypted, Bytes: mod}), pass)
		if err == nil {
			t.Errorf("flipped byte %d: decrypted", i)
		}
	}
	short := pem.EncodeToMemory(&pem.Block{Type: TypeEncrypted, Bytes: blk.Bytes[:headerSize+15]})
	if _, err := Decrypt(short, pass); err == nil || errors.Is(err, ErrPassphrase) {
		t.Errorf("short file: %v", err)
	}
	if _, err := Decrypt(append(bytes.Clone(b), "junk"...), pass); err == nil {
		t.Error("trailing junk accepted")
	}
}

func TestParseStrict(t *testing.T) {
	k := keys(t)["ed25519"]
	good, _ := Marshal(k)
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	der224, _ := x509.MarshalPKCS8PrivateKey(p224)
	for name, data := range map[string][]byte{
		"empty":    nil,
		"trailing": append(bytes.Clone(good), "x"...),
		"two":      append(bytes.Clone(good), good...),
		"type":     pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}),
		"headers":  pem.EncodeToMemory(&pem.Block{Type: TypePlain, Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"}, Bytes: der}),
		"garbage":  pem.EncodeToMemory(&pem.Block{Type: TypePlain, Bytes: []byte{0x30, 0x03, 1, 2, 3}}),
		"p224":     pem.EncodeToMemory(&pem.Block{Type: TypePlain, Bytes: der224}),
	} {
		if _, err := Parse(data); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	if _, err := Parse(append(bytes.Clone(good), "\n\n"...)); err != nil {
		t.Errorf("trailing newlines: %v", err)
	}
}

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "proxy.pem")
	if err := Write(path, []byte("secret")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != Mode {
		t.Fatalf("mode %v, %v; want %v", st.Mode(), err, Mode)
	}
	if st, _ := os.Stat(filepath.Dir(path)); st.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v", st.Mode())
	}
	if b, err := Read(path); err != nil || string(b) != "secret" {
		t.Fatalf("Read = %q, %v", b, err)
	}
	// Rewriting replaces the file and leaves no temporary behind.
	if err := Write(path, []byte("again")); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("directory holds %d entries", len(ents))
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := Read(path)
		var pe *PermissionError
		if !errors.As(err, &pe) || pe.Mode.Perm() != mode || !strings.Contains(err.Error(), "chmod 600 "+path) {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	if _, err := Read(dir); err == nil {
		t.Error("read a directory")
	}
	if _, err := Read(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big")
	if err := Write(big, make([]byte, 65<<10)); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(big); err == nil {
		t.Error("read an oversized key file")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	k := keys(t)["p256"]
	plain, _ := Marshal(k)
	sealed, err := Encrypt(k, []byte("pw"), cheap)
	if err != nil {
		t.Fatal(err)
	}
	pp, sp := filepath.Join(dir, "plain"), filepath.Join(dir, "sealed")
	if err := Write(pp, plain); err != nil {
		t.Fatal(err)
	}
	if err := Write(sp, sealed); err != nil {
		t.Fatal(err)
	}
	asked := 0
	ask := func() ([]byte, error) { asked++; return []byte("pw"), nil }
	if got, err := Load(pp, ask); err != nil || !same(got, k) || asked != 0 {
		t.Errorf("plain: %v, asked %d", err, asked)
	}
	if got, err := Load(sp, ask); err != nil || !same(got, k) || asked != 1 {
		t.Errorf("sealed: %v, asked %d", err, asked)
	}
	if _, err := Load(sp, nil); err == nil {
		t.Error("sealed key loaded without a passphrase")
	}
	if _, err := Load(sp, func() ([]byte, error) { return []byte("no"), nil }); !errors.Is(err, ErrPassphrase) {
		t.Errorf("wrong passphrase: %v", err)
	}
	stop := errors.New("cancelled")
	if _, err := Load(sp, func() ([]byte, error) { return nil, stop }); !errors.Is(err, stop) {
		t.Errorf("prompt error: %v", err)
	}
	os.Chmod(pp, 0o644)
	var pe *PermissionError
	if _, err := Load(pp, nil); !errors.As(err, &pe) {
		t.Errorf("world-readable key loaded: %v", err)
	}
}
