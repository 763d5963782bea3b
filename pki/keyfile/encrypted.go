package keyfile

import (
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/youmark/pkcs8"
)

// Passphrase-protected keys are written as OpenSSL writes them (`openssl
// pkcs8 -topk8 -scrypt`), so grid tools (grid-proxy-init, openssl pkey)
// read gridlink's user keys and gridlink reads theirs: one PEM block of
// type TypePKCS8Encrypted, an EncryptedPrivateKeyInfo (RFC 5958) whose
// encryption is PBES2 (RFC 8018) with
//
//	key derivation  scrypt (RFC 7914), 16-byte random salt, N = 2^LogN,
//	                r, p of the Cost (DefaultCost: 2^14, 8, 5)
//	encryption      AES-256-CBC, 16-byte random IV
//
// around the key's PKCS #8 DER. OpenSSL derives scrypt keys in at most
// 32 MiB (128·N·r bytes), so N·r stays within maxWriteNR; p, which
// costs time rather than memory, buys the strength back (OWASP's
// N=2^14, r=8, p=5 is as costly as N=2^17, r=8, p=1).
//
// Read besides: PKCS #8 with PBES2 (scrypt or PBKDF2, AES-CBC or GCM,
// as github.com/youmark/pkcs8 reads them); OpenSSL's traditional
// encrypted PEM (Proc-Type: 4,ENCRYPTED headers over an RSA PRIVATE KEY
// or EC PRIVATE KEY, as grid userkey.pem files often are: RFC 1423,
// which x509.DecryptPEMBlock still opens though it is deprecated for its
// weak key derivation); gridlink's older format (legacy.go).
const (
	TypePKCS8Encrypted = "ENCRYPTED PRIVATE KEY"
	maxWriteNR         = 1 << 17  // 128·N·r ≤ 16 MiB: OpenSSL reads it
	maxIterations      = 10000000 // of PBKDF2 in a file read
)

// Cost is the scrypt cost of a protected key: N = 2^LogN, block size R,
// parallelism P.
type Cost struct{ LogN, R, P int }

// DefaultCost (the zero Cost) takes 16 MiB five times over, a fraction
// of a second: a key is decrypted once per proxy lifetime, and a stolen
// file should resist guessing.
var DefaultCost = Cost{LogN: 14, R: 8, P: 5}

// ErrPassphrase is returned by Decrypt when the passphrase is wrong (or the
// sealed key was altered: the two cannot be told apart).
var ErrPassphrase = errors.New("keyfile: wrong passphrase (or a damaged key file)")

// Encrypt seals key under passphrase at the given scrypt cost (zero:
// DefaultCost) and returns the PEM block to write to a key file.
func Encrypt(key crypto.Signer, passphrase []byte, cost Cost) ([]byte, error) {
	if cost == (Cost{}) {
		cost = DefaultCost
	}
	if err := cost.check(); err != nil {
		return nil, err
	}
	if (1<<cost.LogN)*cost.R > maxWriteNR {
		return nil, fmt.Errorf("keyfile: scrypt cost logN=%d r=%d needs more than the %d MiB OpenSSL allows: raise p instead", cost.LogN, cost.R, 128*maxWriteNR>>20)
	}
	if len(passphrase) == 0 {
		return nil, errors.New("keyfile: empty passphrase")
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	der, err := pkcs8.MarshalPrivateKey(key, passphrase, &pkcs8.Opts{
		Cipher:  pkcs8.AES256CBC,
		KDFOpts: pkcs8.ScryptOpts{SaltSize: saltSize, CostParameter: 1 << cost.LogN, BlockSize: cost.R, ParallelizationParameter: cost.P},
	})
	if err != nil {
		return nil, fmt.Errorf("keyfile: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: TypePKCS8Encrypted, Bytes: der}), nil
}

// Decrypt opens a passphrase-protected key of any of the formats above.
// A wrong passphrase gives ErrPassphrase; a malformed file a descriptive
// error.
func Decrypt(data, passphrase []byte) (crypto.Signer, error) {
	blk, err := anyBlock(data)
	if err != nil {
		return nil, err
	}
	switch {
	case blk.Type == TypeEncrypted && len(blk.Headers) == 0:
		return openLegacy(blk, passphrase)
	case blk.Type == TypePKCS8Encrypted && len(blk.Headers) == 0:
		if err := checkPBES2(blk.Bytes); err != nil {
			return nil, err
		}
		k, err := pkcs8.ParsePKCS8PrivateKey(blk.Bytes, passphrase)
		if err != nil {
			// The structure and its parameters were checked: what
			// fails now is the decryption or the key it gave.
			return nil, ErrPassphrase
		}
		return signer(k)
	case traditional(blk):
		//lint:ignore SA1019 grid users' userkey.pem files are in this format
		der, err := x509.DecryptPEMBlock(blk, passphrase) //nolint:staticcheck
		if errors.Is(err, x509.IncorrectPasswordError) {
			return nil, ErrPassphrase
		}
		if err != nil {
			return nil, fmt.Errorf("keyfile: %w", err)
		}
		return parseTraditional(blk.Type, der)
	}
	return nil, fmt.Errorf("keyfile: a PEM %q block, want an encrypted key (%q)", blk.Type, TypePKCS8Encrypted)
}

// traditional reports whether blk is an OpenSSL traditional encrypted key.
func traditional(blk *pem.Block) bool {
	//lint:ignore SA1019 see Decrypt
	return (blk.Type == typeRSA || blk.Type == typeEC) && x509.IsEncryptedPEMBlock(blk) //nolint:staticcheck
}

// The PBES2 structures checkPBES2 reads (RFC 8018, RFC 7914).
type (
	encryptedKeyInfo struct {
		Algorithm pkix.AlgorithmIdentifier
		Data      []byte
	}
	pbes2Params struct {
		KDF, Scheme pkix.AlgorithmIdentifier
	}
	scryptParams struct {
		Salt      []byte
		N, R, P   int
		KeyLength int `asn1:"optional"`
	}
	pbkdf2Params struct {
		Salt       []byte
		Iterations int
		Rest       asn1.RawValue `asn1:"optional"`
	}
)

var (
	oidPBES2  = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 13}
	oidPBKDF2 = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 12}
	oidScrypt = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 11591, 4, 11}
)

// checkPBES2 checks an EncryptedPrivateKeyInfo's form and bounds its key
// derivation's cost (a file's scrypt parameters within what Cost allows,
// PBKDF2 within maxIterations), before any work is spent on it.
func checkPBES2(der []byte) error {
	var info encryptedKeyInfo
	var p pbes2Params
	if rest, err := asn1.Unmarshal(der, &info); err != nil || len(rest) != 0 {
		return errors.New("keyfile: malformed encrypted PKCS #8 key")
	}
	if !info.Algorithm.Algorithm.Equal(oidPBES2) {
		return fmt.Errorf("keyfile: encrypted PKCS #8 key with %v: want PBES2 (openssl pkcs8 -topk8 -v2 aes-256-cbc)", info.Algorithm.Algorithm)
	}
	if rest, err := asn1.Unmarshal(info.Algorithm.Parameters.FullBytes, &p); err != nil || len(rest) != 0 {
		return errors.New("keyfile: malformed PBES2 parameters")
	}
	switch {
	case p.KDF.Algorithm.Equal(oidScrypt):
		var s scryptParams
		if rest, err := asn1.Unmarshal(p.KDF.Parameters.FullBytes, &s); err != nil || len(rest) != 0 {
			return errors.New("keyfile: malformed scrypt parameters")
		}
		logN := 0
		for 1<<logN < s.N && logN < 64 {
			logN++
		}
		if 1<<logN != s.N {
			return fmt.Errorf("keyfile: scrypt N=%d is not a power of 2", s.N)
		}
		return Cost{LogN: logN, R: s.R, P: s.P}.check()
	case p.KDF.Algorithm.Equal(oidPBKDF2):
		var s pbkdf2Params
		if rest, err := asn1.Unmarshal(p.KDF.Parameters.FullBytes, &s); err != nil || len(rest) != 0 {
			return errors.New("keyfile: malformed PBKDF2 parameters")
		}
		if s.Iterations < 1 || s.Iterations > maxIterations {
			return fmt.Errorf("keyfile: PBKDF2 with %d iterations, want 1..%d", s.Iterations, maxIterations)
		}
		return nil
	}
	return fmt.Errorf("keyfile: PBES2 key derivation %v: want scrypt or PBKDF2", p.KDF.Algorithm)
}
func (c Cost) check() error {
	if c.LogN < minLogN || c.LogN > maxLogN || c.R < 1 || c.R > maxR || c.P < 1 || c.P > maxP {
		return fmt.Errorf("keyfile: scrypt cost logN=%d r=%d p=%d out of range (logN %d..%d, r 1..%d, p 1..%d)",
			c.LogN, c.R, c.P, minLogN, maxLogN, maxR, maxP)
	}
	if 128*(1<<c.LogN)*c.R > maxMemory {
		return fmt.Errorf("keyfile: scrypt cost logN=%d r=%d needs more than %d MiB", c.LogN, c.R, maxMemory>>20)
	}
	return nil
}
