// Package pki proves identities over connections: every gridlink
// connection, direct or relayed, starts with a TLS 1.3 handshake in which
// both ends present a certificate for their Ed25519 key, each checks that
// the other's key is the one it meant to reach, and each sends its verdict
// on the other (verdict.go) before any data.
//
// A node's or hub's credentials are either a self-signed certificate (an
// open grid: the certificate proves the key, the ID, and nothing else) or
// a chain from a grid CA (Certified): a hub's or node's certificate for
// its identity key, or a user's proxy chain whose proxy key is the
// identity key. With a Trust, an end admits only peers whose chain the
// Trust validates (package chain: the CAs, revocation, RFC 3820 proxies);
// a judge given to Client or Server can refuse more (access control).
//
// It owns certificates, their verification and the verdict; the keys
// themselves are package identity's, issuing certificates packages ca and
// proxy's.
package pki

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"sync/atomic"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki/chain"
	"github.com/gridlink/gridlink/pki/proxy"
)

// ALPN is the protocol name both ends must agree on.
const ALPN = "gridlink/1"

// Credentials are what a node or hub shows in a handshake, and whom it
// admits.
type Credentials struct {
	Key identity.Key
	// cert is what handshakes from now on present: swapped whole by
	// Renew, read by each handshake (GetCertificate,
	// GetClientCertificate), so connections already up are untouched.
	cert  atomic.Pointer[tls.Certificate]
	trust *Trust // nil: an open grid, any key is admitted
}

// Certified makes credentials presenting chain (leaf first, up to the
// end-entity certificate; the CA's may follow) for key, admitting the
// peers trust validates. The leaf must certify key, and trust must
// validate chain itself: a misconfigured node fails here, not at its
// first connection.
func Certified(key identity.Key, chain []*x509.Certificate, trust *Trust) (*Credentials, error) {
	if key.IsZero() {
		return nil, errors.New("pki: no key")
	}
	if len(chain) == 0 {
		return nil, errors.New("pki: no certificate")
	}
	if trust == nil {
		return nil, errors.New("pki: certified credentials need a Trust (the CA certificates)")
	}
	if pub, ok := chain[0].PublicKey.(ed25519.PublicKey); !ok || !pub.Equal(key.Private().Public()) {
		return nil, fmt.Errorf("pki: certificate %s is not for this key (ID %s)", chain[0].Subject, key.ID().Short())
	}
	if _, err := trust.VerifyCertificates(chain); err != nil {
		return nil, fmt.Errorf("pki: own certificate: %w", err)
	}
	return Unchecked(key, chain, trust), nil
}

// FromProxy makes credentials of a proxy credential (a user's proxy from
// `gridlink proxy init`, or one delegated to a service): the proxy's key is
// the node's identity key (ProxyKey).
func FromProxy(p *proxy.Credential, trust *Trust) (*Credentials, error) {
	key, err := ProxyKey(p)
	if err != nil {
		return nil, err
	}
	return Certified(key, p.Chain, trust)
}

// ProxyKey is a proxy's key as a node's identity key: it must be Ed25519.
func ProxyKey(p *proxy.Credential) (identity.Key, error) {
	priv, ok := p.Key.(ed25519.PrivateKey)
	if !ok {
		return identity.Key{}, fmt.Errorf("pki: a proxy with a %T key cannot be a node's identity (want Ed25519)", p.Key)
	}
	return identity.KeyFromSeed(priv.Seed()), nil
}

// Trust is what these credentials admit: nil for an open grid.
func (c *Credentials) Trust() *Trust { return c.trust }

// Peer is who the other end of a handshake proved to be.
type Peer struct {
	ID identity.ID // the peer's identity key
	// Chain is what the peer's certificate chain proves (its subject,
	// role, groups, proxy restriction); nil in an open grid.
	Chain *chain.Result

	certs []*x509.Certificate // the chain it showed, for Trust.Recheck
	at    time.Time           // when it was checked
}

// String names the peer: its subject and ID, or its ID.
func (p Peer) String() string {
	if p.Chain == nil {
		return p.ID.Short()
	}
	s := p.Chain.Name + " (" + string(p.Chain.Role)
	if p.Chain.Proxies > 0 {
		s += " proxy"
	}
	return s + ", " + p.ID.Short() + ")"
}

// Allows reports whether the peer may use service at the node whose
// identity key is node: always in an open grid, else unless its proxy
// chain is restricted to other services or to the service at other nodes.
func (p Peer) Allows(service string, node identity.ID) bool {
	return p.Chain == nil || p.Chain.Allows(service, node)
}

// Check says who the chain (leaf first, as TLS parsed it) proves, or why
// these credentials do not admit it.
func (c *Credentials) Check(certs []*x509.Certificate) (Peer, error) {
	if len(certs) == 0 {
		return Peer{}, errors.New("peer sent no certificate")
	}
	id, err := idFromCert(certs[0])
	if err != nil {
		return Peer{}, err
	}
	if c.trust == nil {
		return Peer{ID: id}, nil
	}
	at := time.Now()
	res, err := c.trust.v.Load().VerifyCertificates(certs, at)
	if err != nil {
		return Peer{ID: id}, err
	}
	return Peer{ID: id, Chain: res, certs: certs, at: at}, nil
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
	c := &Credentials{Key: key}
	c.cert.Store(&tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key.Private()})
	return c, nil
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
func (c *Credentials) Certificate() tls.Certificate { return *c.cert.Load() }

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
		GetCertificate:         func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.cert.Load(), nil },
		GetClientCertificate:   func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c.cert.Load(), nil },
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
// the peer is want (any peer if want is zero; a wrong peer fails the
// handshake with a *PeerError). It then judges the peer: its chain must
// satisfy the credentials' Trust, and judge (nil: any) may refuse it. It
// returns the secured connection, this end's verdict sent, or the
// refusal (*DeniedError). The connection reads no further than its
// records (NoReadAhead), so it can be left for the clear (Beneath).
func (c *Credentials) Client(ctx context.Context, conn net.Conn, want identity.ID, judge func(Peer) error) (*Conn, error) {
	tc := tls.Client(NoReadAhead(conn), c.config(func(id identity.ID) error {
		if !want.IsZero() && id != want {
			return &PeerError{Want: want, Got: id}
		}
		return nil
	}))
	return c.finish(ctx, tc, judge)
}

// Server runs the handshake as the accepting side and judges the peer
// like Client.
func (c *Credentials) Server(ctx context.Context, conn net.Conn, judge func(Peer) error) (*Conn, error) {
	tc := tls.Server(NoReadAhead(conn), c.config(func(identity.ID) error { return nil }))
	return c.finish(ctx, tc, judge)
}

func (c *Credentials) finish(ctx context.Context, tc *tls.Conn, judge func(Peer) error) (*Conn, error) {
	if err := tc.HandshakeContext(ctx); err != nil {
		var pe *PeerError
		if errors.As(err, &pe) {
			return nil, pe
		}
		return nil, fmt.Errorf("handshake with %s: %w", tc.RemoteAddr(), err)
	}
	if tc.ConnectionState().NegotiatedProtocol != ALPN {
		tc.Close()
		return nil, fmt.Errorf("handshake with %s: peer does not speak %s", tc.RemoteAddr(), ALPN)
	}
	return c.Settle(tc, judge)
}

// Settle judges the peer of a finished handshake (its chain, then judge,
// which may be nil) and sends this end's verdict: the Conn, or the
// refusal (*DeniedError; the connection is then closed). It is for callers
// that run the TLS handshake themselves (package direct); Client and
// Server call it.
func (c *Credentials) Settle(tc *tls.Conn, judge func(Peer) error) (*Conn, error) {
	peer, err := c.Check(tc.ConnectionState().PeerCertificates)
	if err == nil && judge != nil {
		err = judge(peer)
	}
	conn := &Conn{Conn: tc, Peer: peer}
	if err := conn.admit(err); err != nil {
		return nil, err
	}
	return conn, nil
}

// Unchecked makes credentials presenting chain for key, like Certified but
// without checking that the chain belongs to key or that trust accepts it:
// for tests of what peers refuse (expired, revoked, tampered chains).
func Unchecked(key identity.Key, chain []*x509.Certificate, trust *Trust) *Credentials {
	raw := make([][]byte, len(chain))
	for i, c := range chain {
		raw[i] = c.Raw
	}
	cert := tls.Certificate{Certificate: raw, PrivateKey: key.Private()}
	if len(chain) > 0 {
		cert.Leaf = chain[0]
	}
	c := &Credentials{Key: key, trust: trust}
	c.cert.Store(&cert)
	return c
}
