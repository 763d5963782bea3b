package direct

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
)

// ALPN protocol names of the direct layer (see the package doc).
const (
	// requestPrefix followed by the request is what the dialler offers
	// and the listener selects to accept; an empty request is offered as
	// plain pki.ALPN.
	requestPrefix = pki.ALPN + "/"
	// RefusedALPN is selected by the listener to refuse the request. It
	// does not start with requestPrefix, so no request can collide with it.
	RefusedALPN = pki.ALPN + "-refused"
	// MaxRequest is the longest request: an ALPN protocol name is at most
	// 255 bytes.
	MaxRequest = 255 - len(requestPrefix)
)

// requestProto is the ALPN protocol that carries request.
func requestProto(request string) string {
	if request == "" {
		return pki.ALPN
	}
	return requestPrefix + request
}

// checkRequest reports whether request can be sent: at most MaxRequest
// visible ASCII characters (no spaces or control characters).
func checkRequest(request string) error {
	if len(request) > MaxRequest {
		return fmt.Errorf("request of %d bytes, at most %d", len(request), MaxRequest)
	}
	for i := 0; i < len(request); i++ {
		if c := request[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("request %q: only visible ASCII characters are allowed", request)
		}
	}
	return nil
}

// parseOffer finds the request among the ALPN protocols a ClientHello
// offers: the first that is pki.ALPN or starts with requestPrefix. It
// reports whether the dialler also offered RefusedALPN, and an error if no
// usable request protocol was offered.
func parseOffer(protos []string) (proto, request string, canRefuse bool, err error) {
	found := false
	for _, p := range protos {
		switch {
		case p == RefusedALPN:
			canRefuse = true
		case found:
		case p == pki.ALPN:
			proto, found = p, true
		case strings.HasPrefix(p, requestPrefix):
			req := p[len(requestPrefix):]
			if e := checkRequest(req); e != nil || req == "" {
				if err == nil {
					err = fmt.Errorf("bad request protocol %q", clip(p))
				}
				continue
			}
			proto, request, found = p, req, true
		}
	}
	if found {
		return proto, request, canRefuse, nil
	}
	if err == nil {
		err = fmt.Errorf("dialler offered no %s protocol (offered %q)", pki.ALPN, clipAll(protos))
	}
	return "", "", canRefuse, err
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

func clipAll(ss []string) []string {
	if len(ss) > 8 {
		ss = ss[:8]
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = clip(s)
	}
	return out
}

// certificate returns the certificate of creds' key (pki makes and keeps
// it; this package builds its own TLS configuration to carry requests).
func certificate(creds *pki.Credentials) (*tls.Certificate, error) {
	if creds == nil || creds.Key.IsZero() {
		return nil, errors.New("no credentials")
	}
	c := creds.Certificate()
	return &c, nil
}

// peerID returns the ID a peer's certificate chain proves.
func peerID(raw [][]byte) (identity.ID, error) { return pki.PeerID(raw) }

// baseConfig is what both sides share.
func baseConfig(cert *tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates:           []tls.Certificate{*cert},
		MinVersion:             tls.VersionTLS13,
		InsecureSkipVerify:     true, // the check is VerifyPeerCertificate's: keys, not host names
		SessionTicketsDisabled: true,
	}
}

// clientHandshake runs the dialling side of the handshake over raw: it
// claims creds' ID, offers request, checks the peer is want (anyone if
// zero) and returns the connection, or an error wrapping pki.ErrWrongPeer
// (a *pki.PeerError) or ErrRefused (a *RefusedError). raw is closed on
// error.
func clientHandshake(ctx context.Context, creds *pki.Credentials, raw net.Conn, want identity.ID, request string, admit func(pki.Peer, string) error) (*Conn, error) {
	cert, err := certificate(creds)
	if err != nil {
		raw.Close()
		return nil, err
	}
	var got identity.ID
	cfg := baseConfig(cert)
	cfg.ServerName = creds.Key.ID().String()
	cfg.NextProtos = []string{requestProto(request), RefusedALPN}
	cfg.VerifyPeerCertificate = func(rawCerts [][]byte, _ [][]*x509.Certificate) error {
		id, err := peerID(rawCerts)
		if err != nil {
			return err
		}
		got = id
		if !want.IsZero() && id != want {
			return &pki.PeerError{Want: want, Got: id}
		}
		return nil
	}
	tc := tls.Client(pki.NoReadAhead(raw), cfg) // see pki.Beneath
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		var pe *pki.PeerError
		if errors.As(err, &pe) {
			return nil, pe
		}
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	switch proto := tc.ConnectionState().NegotiatedProtocol; proto {
	case requestProto(request):
		var judge func(pki.Peer) error
		if admit != nil {
			judge = func(p pki.Peer) error { return admit(p, request) }
		}
		pc, err := creds.Settle(tc, judge)
		if err != nil {
			return nil, err
		}
		return &Conn{Conn: pc, Peer: got, Request: request}, nil
	case RefusedALPN:
		reason, rerr := readRefusal(ctx, tc)
		tc.Close()
		if rerr != nil {
			reason = "(no reason: " + rerr.Error() + ")"
		}
		return nil, &RefusedError{Peer: got, Request: request, Reason: reason}
	default:
		tc.Close()
		return nil, fmt.Errorf("tls handshake: peer selected protocol %q, not %q: not a gridlink direct listener", clip(proto), requestProto(request))
	}
}

// serverState is what the listener learns about one connection during its
// handshake.
type serverState struct {
	claim   identity.ID // who the dialler said it is (and then proved)
	request string
	refusal string    // non-empty: refuse with this reason
	kind    QuietKind // the refusal's kind (RefusalKind), for the log's rate limit
}

// serverConfig returns a tls.Config for one incoming connection that
// records what it learns in st. decide judges the claimed ID and the
// request and returns a refusal (nil: accepted).
func serverConfig(cert *tls.Certificate, st *serverState, decide func(identity.ID, string) error) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			proto, request, canRefuse, perr := parseOffer(hello.SupportedProtos)
			claim, cerr := identity.ParseID(hello.ServerName)
			var refusal error
			switch {
			case cerr != nil:
				refusal = fmt.Errorf("dialler did not name itself (server_name %q is not an ID)", clip(hello.ServerName))
			case perr != nil:
				refusal = perr
			default:
				refusal = decide(claim, request)
			}
			cfg := baseConfig(cert)
			cfg.ClientAuth = tls.RequireAnyClientCert
			st.claim, st.request = claim, request
			if refusal != nil {
				st.refusal, st.kind = refusal.Error(), RefusalKind(refusal)
				if st.refusal == "" {
					st.refusal = "refused"
				}
				if !canRefuse || cerr != nil {
					// Not a direct dialler: it would not understand a refusal frame.
					return nil, refusal
				}
				proto = RefusedALPN
			}
			cfg.NextProtos = []string{proto}
			cfg.VerifyPeerCertificate = func(rawCerts [][]byte, _ [][]*x509.Certificate) error {
				id, err := peerID(rawCerts)
				if err != nil {
					return err
				}
				if id != claim {
					return fmt.Errorf("dialler claimed to be %s but its certificate is for %s", claim.Short(), id.Short())
				}
				return nil
			}
			return cfg, nil
		},
	}
}
