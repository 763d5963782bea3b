// Package identity defines who is who in gridlink: the Ed25519 key pair of
// every node and hub, the ID derived from it, the machine identifier that
// lists how a machine may be reached, the text form of virtual
// addresses, and what a node's or hub's name may be (name.go). It owns these value types and their text and file encodings;
// proving an identity over a connection is package pki's, and finding a
// machine is the hubs'.
package identity

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base32"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ID names a node or hub: its Ed25519 public key. The zero ID names nobody.
type ID [ed25519.PublicKeySize]byte

var enc = base32.StdEncoding.WithPadding(base32.NoPadding)

// String is the ID's full text form: 52 lower-case base32 characters.
func (id ID) String() string { return strings.ToLower(enc.EncodeToString(id[:])) }

// Short is a 10-character prefix of String, for people and logs.
func (id ID) Short() string { return id.String()[:10] }

// IsZero reports whether id is the zero ID.
func (id ID) IsZero() bool { return id == ID{} }

// PublicKey returns id as an Ed25519 public key.
func (id ID) PublicKey() ed25519.PublicKey { return ed25519.PublicKey(bytes.Clone(id[:])) }

// MarshalText implements encoding.TextMarshaler.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *ID) UnmarshalText(b []byte) error {
	v, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// ParseID parses the full text form of an ID.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 52 {
		return id, fmt.Errorf("identity: bad ID %q: want 52 base32 characters, got %d", clip(s), len(s))
	}
	b, err := enc.DecodeString(strings.ToUpper(s))
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("identity: bad ID %q: not base32", clip(s))
	}
	copy(id[:], b)
	return id, nil
}

// LooksLikeID reports whether s has the shape of a full ID.
func LooksLikeID(s string) bool {
	_, err := ParseID(s)
	return err == nil
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// IDFromPublicKey returns the ID of an Ed25519 public key.
func IDFromPublicKey(pub ed25519.PublicKey) (ID, error) {
	var id ID
	if len(pub) != len(id) {
		return id, fmt.Errorf("identity: public key of %d bytes, want %d", len(pub), len(id))
	}
	copy(id[:], pub)
	return id, nil
}

// Key is a node's or hub's private key. The zero Key is not usable; make
// one with NewKey or LoadKey.
type Key struct{ priv ed25519.PrivateKey }

// NewKey makes a fresh key.
func NewKey() (Key, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	return Key{priv}, err
}

// KeyFromSeed derives a key from a 32-byte seed (for tests and tools).
func KeyFromSeed(seed []byte) Key { return Key{ed25519.NewKeyFromSeed(seed)} }

// ID returns the key's ID.
func (k Key) ID() ID {
	var id ID
	copy(id[:], k.priv.Public().(ed25519.PublicKey))
	return id
}

// Private returns the Ed25519 private key.
func (k Key) Private() ed25519.PrivateKey { return k.priv }

// IsZero reports whether k holds no key.
func (k Key) IsZero() bool { return k.priv == nil }

// String shows the ID, never the private key.
func (k Key) String() string {
	if k.IsZero() {
		return "Key(none)"
	}
	return "Key(" + k.ID().Short() + ")"
}

// LoadKey reads a PEM (PKCS #8) Ed25519 private key file.
func LoadKey(path string) (Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Key{}, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return Key{}, fmt.Errorf("identity: %s: no PEM PRIVATE KEY block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return Key{}, fmt.Errorf("identity: %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return Key{}, fmt.Errorf("identity: %s: a %T key, want Ed25519", path, k)
	}
	return Key{priv}, nil
}

// Save writes the key to path as PEM, readable by its owner only.
func (k Key) Save(path string) error {
	der, err := x509.MarshalPKCS8PrivateKey(k.priv)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

// LoadOrCreateKey loads the key at path, or makes and saves a new one if
// there is no file.
func LoadOrCreateKey(path string) (Key, error) {
	k, err := LoadKey(path)
	if errors.Is(err, os.ErrNotExist) {
		if k, err = NewKey(); err == nil {
			err = k.Save(path)
		}
	}
	return k, err
}
