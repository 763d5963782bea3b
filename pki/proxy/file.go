package proxy

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/keyfile"
)

// A proxy credential file is PEM, as Globus writes proxies:
//
//	CERTIFICATE   the proxy's certificate
//	PRIVATE KEY   its key, plain PKCS #8 (keyfile.TypePlain); read also
//	              as RSA PRIVATE KEY or EC PRIVATE KEY (PKCS #1, SEC 1)
//	CERTIFICATE   its issuer, and so on up to the user's certificate
//
// It is a key file: mode 0600, refused when others can read it.

// MaxChain bounds the certificates of a credential file or delegation
// answer.
const MaxChain = 16

// Marshal encodes c as a proxy credential file.
func Marshal(c *Credential) ([]byte, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	key, err := keyfile.Marshal(c.Key)
	if err != nil {
		return nil, err
	}
	out := ca.EncodeCertificates(c.Chain[0])
	out = append(out, key...)
	return append(out, ca.EncodeCertificates(c.Chain[1:]...)...), nil
}

// Parse decodes a proxy credential file strictly: the blocks in the order
// above, nothing else, the key matching the first certificate. It does not
// validate the chain (package chain does).
func Parse(data []byte) (*Credential, error) {
	var c Credential
	rest := data
	for i := 0; ; i++ {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if i > MaxChain {
			return nil, fmt.Errorf("proxy: credential file of more than %d certificates", MaxChain)
		}
		if len(blk.Headers) != 0 {
			return nil, errors.New("proxy: credential file: unexpected PEM headers")
		}
		want := ca.TypeCertificate
		if i == 1 {
			want = keyfile.TypePlain
		}
		if i == 1 && (blk.Type == "RSA PRIVATE KEY" || blk.Type == "EC PRIVATE KEY") {
			want = blk.Type // as older Globus tools and voms-proxy-init write it
		}
		if blk.Type != want {
			return nil, fmt.Errorf("proxy: credential file: block %d is %q, want %q", i+1, blk.Type, want)
		}
		if i == 1 {
			k, err := keyfile.Parse(pem.EncodeToMemory(blk))
			if err != nil {
				return nil, fmt.Errorf("proxy: credential file: %w", err)
			}
			c.Key = k
			continue
		}
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("proxy: credential file: certificate %d: %w", len(c.Chain)+1, err)
		}
		c.Chain = append(c.Chain, cert)
	}
	for _, b := range rest {
		if b != ' ' && b != '\t' && b != '\r' && b != '\n' {
			return nil, errors.New("proxy: credential file: data that is not a PEM block")
		}
	}
	if c.Key == nil {
		return nil, errors.New("proxy: credential file: want a certificate, its key, then its issuers")
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Save writes c to path as a credential file, mode 0600.
func Save(path string, c *Credential) error {
	b, err := Marshal(c)
	if err != nil {
		return err
	}
	return keyfile.Write(path, b)
}

// Load reads a credential file, refusing one others can read
// (*keyfile.PermissionError).
func Load(path string) (*Credential, error) {
	b, err := keyfile.Read(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return c, nil
}
