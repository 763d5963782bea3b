package keyfile

import (
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"

	"golang.org/x/crypto/scrypt"
)

// The passphrase-protected format gridlink wrote before it wrote PKCS #8
// (issue 36), still read: one PEM block of type TypeEncrypted, no
// headers, whose bytes are
//
//	version  1 byte   formatVersion (1)
//	logN     1 byte   scrypt cost: N = 2^logN, minLogN..maxLogN
//	r        1 byte   scrypt block size, 1..maxR
//	p        1 byte   scrypt parallelism, 1..maxP
//	salt     16 bytes random
//	nonce    12 bytes random
//	sealed   the PKCS #8 DER of the key sealed with AES-256-GCM under
//	         scrypt(passphrase, salt, N, r, p, 32 bytes), the 32 bytes
//	         above as additional data (so the header cannot be altered),
//	         ending in the 16-byte tag
//
// 128·N·r bytes of memory (maxMemory at most) derive the key.
const (
	formatVersion = 1
	saltSize      = 16
	nonceSize     = 12
	headerSize    = 4 + saltSize + nonceSize
	minLogN       = 10
	maxLogN       = 22
	maxR          = 32
	maxP          = 16
	maxMemory     = 1 << 30
)

// sealLegacy seals key in the old format (tests: files written before).
func sealLegacy(key crypto.Signer, passphrase []byte, cost Cost) ([]byte, error) {
	if cost == (Cost{}) {
		cost = DefaultCost
	}
	if err := cost.check(); err != nil {
		return nil, err
	}
	if len(passphrase) == 0 {
		return nil, errors.New("keyfile: empty passphrase")
	}
	der, err := marshalDER(key)
	if err != nil {
		return nil, err
	}
	hdr := make([]byte, headerSize)
	hdr[0], hdr[1], hdr[2], hdr[3] = formatVersion, byte(cost.LogN), byte(cost.R), byte(cost.P)
	if _, err := rand.Read(hdr[4:]); err != nil {
		return nil, err
	}
	aead, err := newAEAD(passphrase, hdr, cost)
	if err != nil {
		return nil, err
	}
	nonce := hdr[4+saltSize:]
	out := append(hdr[:headerSize:headerSize], aead.Seal(nil, nonce, der, hdr)...)
	return pem.EncodeToMemory(&pem.Block{Type: TypeEncrypted, Bytes: out}), nil
}

// openLegacy opens a key of the old format. A wrong passphrase gives
// ErrPassphrase; a malformed file a descriptive error.
func openLegacy(blk *pem.Block, passphrase []byte) (crypto.Signer, error) {
	b := blk.Bytes
	if len(b) < headerSize+16 {
		return nil, errors.New("keyfile: protected key too short")
	}
	if b[0] != formatVersion {
		return nil, fmt.Errorf("keyfile: protected key format version %d, want %d", b[0], formatVersion)
	}
	cost := Cost{LogN: int(b[1]), R: int(b[2]), P: int(b[3])}
	if err := cost.check(); err != nil {
		return nil, err
	}
	hdr := b[:headerSize]
	aead, err := newAEAD(passphrase, hdr, cost)
	if err != nil {
		return nil, err
	}
	der, err := aead.Open(nil, hdr[4+saltSize:], b[headerSize:], hdr)
	if err != nil {
		return nil, ErrPassphrase
	}
	return parseDER(der)
}

func newAEAD(passphrase, hdr []byte, c Cost) (cipher.AEAD, error) {
	k, err := scrypt.Key(passphrase, hdr[4:4+saltSize], 1<<c.LogN, c.R, c.P, 32)
	if err != nil {
		return nil, fmt.Errorf("keyfile: scrypt: %w", err)
	}
	blk, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(blk)
}
