package proxy

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"time"

	"golang.org/x/crypto/cryptobyte"
)

// Delegation hands a proxy to a remote service without moving a private
// key. The service (the delegatee) makes a key and sends a request; the
// delegator signs a proxy for that key and sends the answer back:
//
//	delegatee: p, req := NewRequest(...)            → req
//	delegator: r := ParseRequest(req); a := Delegate(cred, r, opts) → a
//	delegatee: cred := p.Accept(a)
//
// Both travel over a connection that already authenticated both ends; this
// package does not carry them. Formats (big-endian; lengths count bytes):
//
//	request:
//	  magic     4 bytes  "GLDQ"
//	  version   1 byte   1
//	  key       uint16 length, SubjectPublicKeyInfo DER of the new key
//	            (Ed25519, or ECDSA P-256/P-384), at most maxKeySize
//	  lifetime  uint32   seconds the delegatee asks for (0: the delegator's choice)
//	  services  uint8 count (0..MaxServices), each a uint8 length and a
//	            restriction entry (SERVICE or SERVICE@NODEID, see
//	            OIDProxyCertInfo), sorted, no repeats: the restriction
//	            asked for (none: whatever the delegator grants)
//	  proof     uint16 length, the new key's signature over proofContext
//	            followed by every byte above (Ed25519; ECDSA: ASN.1 over
//	            SHA-256 for P-256, SHA-384 for P-384), at most maxProofSize
//
//	answer:
//	  magic     4 bytes  "GLDA"
//	  version   1 byte   1
//	  count     uint8    1..MaxChain
//	  certs     count × (uint24 length, certificate DER, at most
//	            maxCertSize): the new proxy, then its issuers up to the
//	            user's certificate
//
// Decoders refuse anything else, including trailing bytes and encodings
// that do not re-encode to the same bytes.
const (
	requestMagic  = "GLDQ"
	answerMagic   = "GLDA"
	formatVersion = 1
	maxKeySize    = 256
	maxProofSize  = 256
	maxCertSize   = 16 << 10
	proofContext  = "gridlink delegation request 1\x00"
)

// Request is a decoded delegation request.
type Request struct {
	Key      crypto.PublicKey // the delegatee's new key
	Lifetime time.Duration    // asked for; 0: the delegator's choice
	Restrict []string         // the restriction asked for; nil: none asked
}

// Pending is the delegatee's side of a delegation in progress: the new key,
// waiting for its certificate.
type Pending struct {
	key     crypto.Signer
	Request Request
}

// NewRequest makes a new Ed25519 key and the request for a proxy of it,
// asking for lifetime (0: the delegator's choice) and restrict (nil: no
// particular restriction).
func NewRequest(lifetime time.Duration, restrict []string) (*Pending, []byte, error) {
	if lifetime < 0 || lifetime > math.MaxUint32*time.Second {
		return nil, nil, fmt.Errorf("proxy: lifetime %v out of range", lifetime)
	}
	if restrict != nil {
		var err error
		if restrict, err = normServices(restrict); err != nil {
			return nil, nil, fmt.Errorf("proxy: %w", err)
		}
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	req := Request{Key: priv.Public(), Lifetime: lifetime.Truncate(time.Second), Restrict: restrict}
	body, err := requestBody(&req)
	if err != nil {
		return nil, nil, err
	}
	proof, err := signProof(priv, body)
	if err != nil {
		return nil, nil, err
	}
	var b cryptobyte.Builder
	b.AddBytes(body)
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(proof) })
	out, err := b.Bytes()
	if err != nil {
		return nil, nil, err
	}
	return &Pending{key: priv, Request: req}, out, nil
}

func requestBody(r *Request) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(r.Key)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	var b cryptobyte.Builder
	b.AddBytes([]byte(requestMagic))
	b.AddUint8(formatVersion)
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(der) })
	b.AddUint32(uint32(r.Lifetime / time.Second))
	b.AddUint8(uint8(len(r.Restrict)))
	for _, s := range r.Restrict {
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(s)) })
	}
	return b.Bytes()
}

var errRequest = errors.New("proxy: malformed delegation request")

// ParseRequest decodes a delegation request strictly and checks its proof
// of possession of the key.
func ParseRequest(data []byte) (*Request, error) {
	s := cryptobyte.String(data)
	var magic []byte
	var version, count uint8
	var keyDER, proof cryptobyte.String
	var secs uint32
	if !s.ReadBytes(&magic, 4) || string(magic) != requestMagic || !s.ReadUint8(&version) {
		return nil, errRequest
	}
	if version != formatVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", errRequest, version, formatVersion)
	}
	if !s.ReadUint16LengthPrefixed(&keyDER) || len(keyDER) > maxKeySize || !s.ReadUint32(&secs) || !s.ReadUint8(&count) {
		return nil, errRequest
	}
	if count > MaxServices {
		return nil, fmt.Errorf("%w: %d services, at most %d", errRequest, count, MaxServices)
	}
	var r Request
	for i := 0; i < int(count); i++ {
		var name cryptobyte.String
		if !s.ReadUint8LengthPrefixed(&name) {
			return nil, errRequest
		}
		if checkEntry(string(name)) != nil || (i > 0 && r.Restrict[i-1] >= string(name)) {
			return nil, fmt.Errorf("%w: bad restriction", errRequest)
		}
		r.Restrict = append(r.Restrict, string(name))
	}
	body := data[:len(data)-len(s)]
	if !s.ReadUint16LengthPrefixed(&proof) || len(proof) > maxProofSize || !s.Empty() {
		return nil, errRequest
	}
	key, err := x509.ParsePKIXPublicKey(keyDER)
	if err != nil {
		return nil, fmt.Errorf("%w: key: %v", errRequest, err)
	}
	if err := checkPublicKey(key); err != nil {
		return nil, fmt.Errorf("%w: %v", errRequest, err)
	}
	if again, err := x509.MarshalPKIXPublicKey(key); err != nil || !bytes.Equal(again, keyDER) {
		return nil, fmt.Errorf("%w: key not in canonical form", errRequest)
	}
	r.Key, r.Lifetime = key, time.Duration(secs)*time.Second
	if !verifyProof(key, body, proof) {
		return nil, fmt.Errorf("%w: the proof of possession does not verify", errRequest)
	}
	return &r, nil
}

func proofDigest(curve elliptic.Curve, msg []byte) ([]byte, crypto.Hash) {
	if curve == elliptic.P384() {
		h := sha512.Sum384(msg)
		return h[:], crypto.SHA384
	}
	h := sha256.Sum256(msg)
	return h[:], crypto.SHA256
}

func signProof(key crypto.Signer, body []byte) ([]byte, error) {
	msg := append([]byte(proofContext), body...)
	if k, ok := key.Public().(*ecdsa.PublicKey); ok {
		d, h := proofDigest(k.Curve, msg)
		return key.Sign(rand.Reader, d, h)
	}
	return key.Sign(rand.Reader, msg, crypto.Hash(0))
}

func verifyProof(pub crypto.PublicKey, body, proof []byte) bool {
	msg := append([]byte(proofContext), body...)
	switch k := pub.(type) {
	case ed25519.PublicKey:
		return ed25519.Verify(k, msg, proof)
	case *ecdsa.PublicKey:
		d, _ := proofDigest(k.Curve, msg)
		return ecdsa.VerifyASN1(k, d, proof)
	}
	return false
}

// Delegate signs a proxy for a request with issuer's key and returns the
// answer. The proxy lives o.Lifetime (zero: DefaultDelegatedLifetime), or
// less if the request asks for less, and never past the issuer; its
// restriction is o.Restrict narrowed to what the request asks for (and
// within the issuer's). The caller has authenticated the delegatee and
// decided it may receive a proxy.
func Delegate(issuer *Credential, req *Request, o Options) ([]byte, error) {
	if req == nil {
		return nil, errors.New("proxy: no request")
	}
	if o.Lifetime <= 0 {
		o.Lifetime = DefaultDelegatedLifetime
	}
	if req.Lifetime > 0 && req.Lifetime < o.Lifetime {
		o.Lifetime = req.Lifetime
	}
	if req.Restrict != nil {
		if o.Independent {
			return nil, errors.New("proxy: the request asks for a restriction and the options for an independent proxy")
		}
		if o.Restrict == nil {
			o.Restrict = req.Restrict
		} else {
			granted, err := normServices(o.Restrict)
			if err != nil {
				return nil, fmt.Errorf("proxy: %w", err)
			}
			both := Intersect(req.Restrict, granted)
			if len(both) == 0 {
				return nil, fmt.Errorf("proxy: the request asks for services %v, none of which may be granted (%v)", req.Restrict, granted)
			}
			o.Restrict = both
		}
	}
	cert, err := Issue(issuer, req.Key, o)
	if err != nil {
		return nil, err
	}
	return marshalAnswer(append([]*x509.Certificate{cert}, issuer.Chain...))
}

func marshalAnswer(chain []*x509.Certificate) ([]byte, error) {
	if len(chain) == 0 || len(chain) > MaxChain {
		return nil, fmt.Errorf("proxy: a chain of %d certificates, want 1..%d", len(chain), MaxChain)
	}
	var b cryptobyte.Builder
	b.AddBytes([]byte(answerMagic))
	b.AddUint8(formatVersion)
	b.AddUint8(uint8(len(chain)))
	for _, c := range chain {
		if len(c.Raw) > maxCertSize {
			return nil, fmt.Errorf("proxy: a certificate of %d bytes, at most %d", len(c.Raw), maxCertSize)
		}
		b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(c.Raw) })
	}
	return b.Bytes()
}

var errAnswer = errors.New("proxy: malformed delegation answer")

// ParseAnswer decodes a delegation answer strictly: the certificates, leaf
// first. It checks their encoding, not their validity.
func ParseAnswer(data []byte) ([]*x509.Certificate, error) {
	s := cryptobyte.String(data)
	var magic []byte
	var version, count uint8
	if !s.ReadBytes(&magic, 4) || string(magic) != answerMagic || !s.ReadUint8(&version) {
		return nil, errAnswer
	}
	if version != formatVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", errAnswer, version, formatVersion)
	}
	if !s.ReadUint8(&count) || count == 0 || int(count) > MaxChain {
		return nil, fmt.Errorf("%w: bad certificate count", errAnswer)
	}
	chain := make([]*x509.Certificate, 0, count)
	for range count {
		var der cryptobyte.String
		if !s.ReadUint24LengthPrefixed(&der) || len(der) > maxCertSize {
			return nil, errAnswer
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("%w: certificate %d: %v", errAnswer, len(chain)+1, err)
		}
		chain = append(chain, c)
	}
	if !s.Empty() {
		return nil, fmt.Errorf("%w: trailing bytes", errAnswer)
	}
	return chain, nil
}

// Accept takes the delegator's answer and returns the delegated proxy: the
// answer's chain with the pending key. It checks that the first certificate
// is a proxy for that key issued by the second; whether the chain is valid
// and whose it is is package chain's to say, and the caller's to check.
func (p *Pending) Accept(answer []byte) (*Credential, error) {
	chain, err := ParseAnswer(answer)
	if err != nil {
		return nil, err
	}
	c := &Credential{Chain: chain, Key: p.key}
	if err := c.check(); err != nil {
		return nil, errors.New("proxy: the delegated certificate is not for the requested key")
	}
	if _, isProxy, err := Of(chain[0]); err != nil || !isProxy {
		return nil, errors.New("proxy: the delegated certificate is not a proxy certificate")
	}
	if len(chain) < 2 || !bytes.Equal(chain[0].RawIssuer, chain[1].RawSubject) {
		return nil, errors.New("proxy: the answer lacks the delegated proxy's issuer")
	}
	return c, nil
}
