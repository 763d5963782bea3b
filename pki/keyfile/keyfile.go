// Package keyfile reads and writes private-key files: plain PEM (PKCS #8)
// keys for keys that must be usable without a passphrase (proxy keys), and
// passphrase-protected keys (Encrypt, Decrypt: encrypted PKCS #8, which
// OpenSSL and the Globus tools read; OpenSSL's traditional encrypted PEM
// and gridlink's older format read too) for the long-lived keys of
// users and the grid CA. Either kind lives in a file only its owner may read
// or write: Write creates it so and Read refuses one that others can read.
//
// It owns the file formats and the permission check. Which key goes in which
// file, and asking a person for the passphrase, are its callers'; node and
// hub identity keys stay package identity's (same plain PEM format).
package keyfile

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// PEM block types.
const (
	// TypePlain is a plain PKCS #8 private key, as openssl and package
	// identity write it.
	TypePlain = "PRIVATE KEY"
	// TypeEncrypted is a passphrase-protected key in gridlink's older
	// format (legacy.go), still read; new keys are TypePKCS8Encrypted.
	TypeEncrypted = "GRIDLINK ENCRYPTED PRIVATE KEY"
	// OpenSSL's traditional key blocks (PKCS #1, SEC 1), read plain or
	// encrypted (Proc-Type: 4,ENCRYPTED), never written.
	typeRSA = "RSA PRIVATE KEY"
	typeEC  = "EC PRIVATE KEY"
)

// Mode is the permission a key file is written with; Read refuses a file
// with any group or other permission bit set.
const Mode fs.FileMode = 0o600

// PermissionError is returned by Read for a key file that others may read
// or write.
type PermissionError struct {
	Path string
	Mode fs.FileMode
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("keyfile: %s is accessible by others (mode %04o): a private key file must be readable by its owner only; run chmod 600 %s",
		e.Path, uint32(e.Mode.Perm()), e.Path)
}

// Marshal encodes key as a plain PEM PKCS #8 block.
func Marshal(key crypto.Signer) ([]byte, error) {
	der, err := marshalDER(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: TypePlain, Bytes: der}), nil
}

// Parse decodes a plain key: PEM PKCS #8 (Ed25519, ECDSA on P-256 or
// P-384, RSA of MinRSABits or more), or OpenSSL's traditional RSA
// PRIVATE KEY or EC PRIVATE KEY. It refuses encrypted keys (use Decrypt)
// and trailing data.
func Parse(data []byte) (crypto.Signer, error) {
	if Encrypted(data) {
		return nil, errors.New("keyfile: the key is passphrase-protected")
	}
	blk, err := onlyBlock(data)
	if err != nil {
		return nil, err
	}
	switch blk.Type {
	case TypePlain:
		return parseDER(blk.Bytes)
	case typeRSA, typeEC:
		return parseTraditional(blk.Type, blk.Bytes)
	}
	return nil, fmt.Errorf("keyfile: a PEM %q block, want %q", blk.Type, TypePlain)
}

// Encrypted reports whether data holds a passphrase-protected key: PKCS
// #8, OpenSSL's traditional encrypted PEM, or gridlink's older format.
func Encrypted(data []byte) bool {
	blk, err := anyBlock(data)
	if err != nil {
		return false
	}
	return blk.Type == TypePKCS8Encrypted || blk.Type == TypeEncrypted || traditional(blk)
}

// Write writes data to path with mode 0600, replacing any file there
// atomically, and creates the directory (mode 0700) if needed.
func Write(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".keyfile-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename there is nothing to remove
	if err := f.Chmod(Mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Read reads a key file, refusing (with a *PermissionError) one that has
// any group or other permission bit, or that is not a regular file.
func Read(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("keyfile: %s is not a regular file", path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, &PermissionError{Path: path, Mode: st.Mode()}
	}
	const limit = 64 << 10 // a key file is a few hundred bytes
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("keyfile: %s: %w", path, err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("keyfile: %s is larger than %d bytes: not a key file", path, limit)
	}
	return b, nil
}

// Load reads the key file at path (see Read) and decodes it: a plain key
// directly, a protected one with the passphrase that passphrase returns
// (asked only then, so a caller may prompt in it).
func Load(path string, passphrase func() ([]byte, error)) (crypto.Signer, error) {
	data, err := Read(path)
	if err != nil {
		return nil, err
	}
	var key crypto.Signer
	if Encrypted(data) {
		if passphrase == nil {
			return nil, fmt.Errorf("keyfile: %s is passphrase-protected and no passphrase was given", path)
		}
		pass, err := passphrase()
		if err != nil {
			return nil, err
		}
		key, err = Decrypt(data, pass)
		if err != nil {
			return nil, fmt.Errorf("%w (%s)", err, path)
		}
		return key, nil
	}
	key, err = Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return key, nil
}

// onlyBlock decodes the one PEM block in data, which has no headers;
// anything but white space around it is an error.
func onlyBlock(data []byte) (*pem.Block, error) {
	blk, err := anyBlock(data)
	if err == nil && len(blk.Headers) != 0 {
		return nil, errors.New("keyfile: unexpected PEM headers")
	}
	return blk, err
}

// anyBlock decodes the one PEM block in data, headers and all.
func anyBlock(data []byte) (*pem.Block, error) {
	blk, rest := pem.Decode(data)
	if blk == nil {
		return nil, errors.New("keyfile: no PEM block")
	}
	for _, c := range rest {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return nil, errors.New("keyfile: data after the PEM block")
		}
	}
	return blk, nil
}

func marshalDER(key crypto.Signer) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	return x509.MarshalPKCS8PrivateKey(key)
}

func parseDER(der []byte) (crypto.Signer, error) {
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("keyfile: %w", err)
	}
	return signer(k)
}

// parseTraditional decodes the DER of an RSA PRIVATE KEY (PKCS #1) or EC
// PRIVATE KEY (SEC 1) block.
func parseTraditional(typ string, der []byte) (crypto.Signer, error) {
	var k any
	var err error
	if typ == typeRSA {
		k, err = x509.ParsePKCS1PrivateKey(der)
	} else {
		k, err = x509.ParseECPrivateKey(der)
	}
	if err != nil {
		return nil, fmt.Errorf("keyfile: %s: %w", typ, err)
	}
	return signer(k)
}

func signer(k any) (crypto.Signer, error) {
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("keyfile: a %T key cannot sign", k)
	}
	if err := checkKey(s); err != nil {
		return nil, err
	}
	return s, nil
}

// MinRSABits is the smallest RSA key read or written.
const MinRSABits = 2048

// checkKey accepts the key types gridlink certificates use: Ed25519,
// ECDSA on P-256 or P-384, and RSA of MinRSABits or more (grid users'
// keys, the proxies grid-proxy-init makes).
func checkKey(key crypto.Signer) error {
	switch k := key.(type) {
	case ed25519.PrivateKey:
		if len(k) != ed25519.PrivateKeySize {
			return errors.New("keyfile: bad Ed25519 key")
		}
		return nil
	case *ecdsa.PrivateKey:
		if k.Curve == elliptic.P256() || k.Curve == elliptic.P384() {
			return nil
		}
		return fmt.Errorf("keyfile: ECDSA key on %s, want P-256 or P-384", k.Curve.Params().Name)
	case *rsa.PrivateKey:
		if k.N.BitLen() < MinRSABits {
			return fmt.Errorf("keyfile: an RSA key of %d bits, want %d or more", k.N.BitLen(), MinRSABits)
		}
		return nil
	case nil:
		return errors.New("keyfile: no key")
	default:
		return fmt.Errorf("keyfile: a %T key, want Ed25519, ECDSA or RSA", key)
	}
}
