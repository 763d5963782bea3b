// Package pki proves identities over connections: every gridlink
// connection, direct or relayed, starts with a TLS 1.3 handshake in which
// both ends present a certificate for their Ed25519 key, and each checks
// that the other's key is the one it meant to reach. It owns certificates
// and their verification; the keys themselves are package identity's.
//
// Today a certificate is self-signed and proves only possession of the key
// (the ID). A grid CA, proxy certificates and revocation (the security issue)
// slot in through Credentials.Chain and Policy without changing callers.
package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"

	"github.com/gridlink/gridlink/identity"
)

// ALPN is the protocol name both ends must agree on.
const ALPN = "gridlink/1"

// Credentials are what a node or hub shows in a handshake.
type Credentials struct {
	Key  identity.Key
	cert tls.Certificate
}

// NewCredentials makes credentials for key with a self-signed certificate.
func NewCredentials(key identity.Key) (*Credentials, error) {
	if key.IsZero() {
		return nil, errors.New("pki: no key")
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: key.ID().String()},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(100 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, key.Private().Public(), key.Private())
	if err != nil {
		return nil, fmt.Errorf("pki: self-signed certificate: %w", err)
	}
	return &Credentials{Key: key, cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key.Private()}}, nil
}

// ErrWrongPeer is wrapped when the peer is not the one expected: the
// identity check that catches a private address naming another machine.
var ErrWrongPeer = errors.New("reached the wrong machine")

// PeerError says who was reached instead of whom.
type PeerError struct {
	Want, Got identity.ID
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("%v: expected %s, found %s", ErrWrongPeer, e.Want.Short(), e.Got.Short())
}

func (e *PeerError) Unwrap() error { return ErrWrongPeer }

// Certificate is the certificate these credentials present, for callers
// that build their own TLS configuration (package direct carries a request
// in its handshake).
func (c *Credentials) Certificate() tls.Certificate { return c.cert }

// PeerID returns the ID a peer's certificate chain (as TLS delivers it to
// VerifyPeerCertificate) proves, or why it proves none.
func PeerID(raw [][]byte) (identity.ID, error) { return peerID(raw) }

// peerID extracts and checks the ID the peer's certificate proves.
func peerID(raw [][]byte) (identity.ID, error) {
	if len(raw) == 0 {
		return identity.ID{}, errors.New("peer sent no certificate")
	}
	cert, err := x509.ParseCertificate(raw[0])
	if err != nil {
		return identity.ID{}, fmt.Errorf("peer certificate: %w", err)
	}
	// The certificate's own signature is not checked: a self-signature
	// proves nothing anyone could not forge, and TLS's CertificateVerify
	// message already proves the peer holds the certificate's key. (CA
	// chains, when they come, are verified as chains.)
	return idFromCert(cert)
}

func (c *Credentials) config(verify func(identity.ID) error) *tls.Config {
	return &tls.Config{
		Certificates:           []tls.Certificate{c.cert},
		MinVersion:             tls.VersionTLS13,
		NextProtos:             []string{ALPN},
		ClientAuth:             tls.RequireAnyClientCert,
		InsecureSkipVerify:     true, // verification is VerifyPeerCertificate's: keys, not host names
		SessionTicketsDisabled: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			id, err := peerID(raw)
			if err != nil {
				return err
			}
			return verify(id)
		},
	}
}

// Client runs the handshake as the dialling side over conn and checks that
// the peer is want (any peer if want is zero). It returns the secured
// connection and the peer's ID. The connection reads no further than its
// records (NoReadAhead), so it can be left for the clear (Beneath).
func (c *Credentials) Client(ctx context.Context, conn net.Conn, want identity.ID) (*tls.Conn, identity.ID, error) {
	var got identity.ID
	tc := tls.Client(NoReadAhead(conn), c.config(func(id identity.ID) error {
		got = id
		if !want.IsZero() && id != want {
			return &PeerError{Want: want, Got: id}
		}
		return nil
	}))
	return finish(ctx, tc, &got)
}

// Server runs the handshake as the accepting side; accept (nil: anyone)
// decides whether the peer may connect.
func (c *Credentials) Server(ctx context.Context, conn net.Conn, accept func(identity.ID) error) (*tls.Conn, identity.ID, error) {
	var got identity.ID
	tc := tls.Server(NoReadAhead(conn), c.config(func(id identity.ID) error {
		got = id
		if accept != nil {
			return accept(id)
		}
		return nil
	}))
	return finish(ctx, tc, &got)
}

func finish(ctx context.Context, tc *tls.Conn, got *identity.ID) (*tls.Conn, identity.ID, error) {
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, *got, fmt.Errorf("handshake with %s: %w", tc.RemoteAddr(), err)
	}
	if tc.ConnectionState().NegotiatedProtocol != ALPN {
		return nil, *got, fmt.Errorf("handshake with %s: peer does not speak %s", tc.RemoteAddr(), ALPN)
	}
	return tc, *got, nil
}
