package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/user"
	"slices"
	"strings"

	"github.com/gridlink/gridlink"
	gexec "github.com/gridlink/gridlink/exec"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/chain"
)

// Grid members (MembersConfig.Listen, `gridlink dashboard --members
// ADDR`; off by default): a second listener, HTTPS, for the members of
// the grid elsewhere, who prove themselves with their grid certificates
// as Globus and GridSite portals had browsers do.
//
//   - The listener presents the dashboard's certificate chain (the one its
//     transfers' node presents: a node's certificate, or the user's
//     proxy), so a member's client can check it with the grid's CA.
//   - It asks every client for a certificate (TLS 1.3, CertificateRequest)
//     but lets the handshake finish without one or with one the grid does
//     not admit: a TLS alert carries no words, so the refusal comes as a
//     403 whose body names the reason, which the dashboard logs in the
//     same words. TLS proves the client holds the key of the chain's first
//     certificate; the chain itself is validated on every request
//     (package chain through the grid's pki.Trust: the grid's CAs, their
//     revocation lists as they are reread, RFC 3820 proxies), so a
//     revocation applies to the next request of a connection already up,
//     and an open event stream ends with the reason (events.go).
//   - Admitted are users (a user's certificate, or a proxy of one);
//     hubs' and nodes' certificates prove machines, not people, and are
//     refused. A proxy restricted to services (proxy init --restrict) is
//     admitted only if its restriction names DashboardService, or
//     DashboardService@ID with the ID of the dashboard's certificate's key.
//   - A member sees what the local user sees (the map, connections, the
//     virtual network, transfers) and changes nothing: starting, pausing
//     and cancelling transfers stay the local user's, run with the user's
//     credentials. Only a member whose subject the grid-mapfile
//     (MembersConfig.MapFile, Globus' format as exec reads it) maps to the
//     dashboard's account may change them too: exec would give that
//     subject that account's shell anyway.
//   - A browser sends its certificate to any page's request, as it sends
//     cookies, so changes need a per-member token in TokenHeader as on
//     the loopback path (no CSRF): the page gets it (an HMAC of the
//     member's certificate under a secret of this dashboard), a form or
//     script of another site cannot set the header without a CORS
//     preflight, which the dashboard does not answer. The owner's token
//     opens nothing here. The Host is not checked: a page of another site
//     that rebinds its name to this address cannot complete TLS, since
//     the dashboard's certificate does not certify that name.
//
// The grid's hub, node and proxy certificates are Ed25519: Go clients
// and OpenSSL 3's (curl --cert) take them in TLS, browsers (chromium) do
// not. For browsers, the listener presents another certificate
// (MembersConfig.CertFile: the host's web server certificate, ECDSA or
// RSA), and the member a user certificate for an ECDSA key (the grid's CA
// certifies users' ECDSA P-256 and P-384 keys), imported into the
// browser.

// DashboardService is the name of the dashboard in proxy restrictions.
const DashboardService = gridlink.DashboardService

// Reasons a member's request is refused (Refusal.Reason), besides those
// chainReasons gives for a chain the grid does not admit and
// RefusedNoHeader or RefusedWrongToken for a change without the member's
// token.
const (
	RefusedNoCert       = "no client certificate: sign on with your grid user certificate or a proxy of it"
	RefusedNotUser      = "not a user's certificate: members sign on as users (a certificate or proxy of one)"
	RefusedRestricted   = "a proxy restricted to other services than " + gridlink.DashboardService
	RefusedMemberChange = "a grid member's change: the transfers here are the local user's"
	RefusedNotAdmitted  = "certificate not admitted by the grid"
)

// chainReasons name what is wrong with a chain, by package chain's
// reason.
var chainReasons = []struct {
	err    error
	reason string
}{
	{chain.ErrNoCertificate, RefusedNoCert},
	{chain.ErrUnknownCA, "not signed by the grid CA"},
	{chain.ErrSignature, "not signed by the grid CA (a bad signature)"},
	{chain.ErrRevoked, "certificate revoked"},
	{chain.ErrExpired, "certificate expired"},
	{chain.ErrNotYetValid, "certificate not yet valid"},
	{chain.ErrIssuer, "a broken chain (a proxy not issued by the certificate after it)"},
	{chain.ErrStaleCRL, "the grid's revocation list is out of date"},
	{chain.ErrLifetime, "a proxy's lifetime beyond the grid's bound"},
	{chain.ErrPolicy, "a proxy policy the grid refuses"},
	{chain.ErrIncomplete, "an incomplete chain"},
}

// chainReason is the reason a chain error gives (RefusedNotAdmitted for
// the rarer ones, whose detail says more).
func chainReason(err error) string {
	for _, c := range chainReasons {
		if errors.Is(err, c.err) {
			return c.reason
		}
	}
	return RefusedNotAdmitted
}

// MembersConfig opens the dashboard to the grid's members (see above).
type MembersConfig struct {
	// Listen is the HTTPS listener's address, HOST:PORT (any host: it is
	// meant to be reached from elsewhere; ":PORT" is every interface).
	// Empty: no members (the default).
	Listen string
	// MapFile is a grid-mapfile: members whose subject it maps to Account
	// may change transfers too. Empty: members only look.
	MapFile string
	// Account is the local account whose transfers these are; empty: the
	// user running the dashboard.
	Account string
	// Creds are the certificate the listener presents and the grid's
	// trust it admits members by; nil: those of Config.Copy.Node (its
	// Credentials files: --ca, --crl, --cert with --key, or --proxy),
	// whose revocation list is reread when it changes. An open grid's
	// credentials are refused (ErrMembersNeedGrid).
	Creds *pki.Credentials
	// CertFile and KeyFile (PEM), if set, are the certificate the
	// listener presents instead of Creds': for browsers, which do not
	// take the grid's Ed25519 certificates in TLS, e.g. the host's web
	// server certificate (ECDSA or RSA, naming the host). Members are
	// still admitted by Creds' trust.
	CertFile, KeyFile string
}

// ErrMembersNeedGrid is a members' listener without a grid CA to admit
// them by, or without a certificate of its own.
var ErrMembersNeedGrid = errors.New("dashboard: members sign on with grid certificates: it needs the grid's CA (--ca) and a certificate of its own (--cert with --key, or --proxy)")

// members is the members' listener's state.
type members struct {
	ln      net.Listener
	creds   *pki.Credentials
	trust   *pki.Trust
	node    identity.ID // the ID restrictions' SERVICE@ID entries name
	mapFile string
	account string
	secret  []byte // keys the members' tokens
	watch   bool   // reread the revocation list file (Trust.Watch)
	cert    tls.Certificate
}

// newMembers loads the credentials and listens; nil without
// MembersConfig.Listen.
func newMembers(cfg Config) (*members, error) {
	mc := cfg.Members
	if mc.Listen == "" {
		return nil, nil
	}
	m := &members{creds: mc.Creds, mapFile: mc.MapFile, account: mc.Account}
	if m.creds == nil {
		n := cfg.Copy.Node
		key := n.Key
		if key.IsZero() {
			var err error
			if key, err = gridlink.LoadKey(n.KeyFile); err != nil {
				return nil, fmt.Errorf("dashboard: members: %w", err)
			}
		}
		var err error
		if m.creds, _, err = n.Credentials.Load(key); err != nil {
			return nil, fmt.Errorf("dashboard: members: %w", err)
		}
		m.watch = true
	}
	m.trust = m.creds.Trust()
	if m.trust == nil || len(m.creds.Certificate().Certificate) == 0 {
		return nil, ErrMembersNeedGrid
	}
	m.node = m.creds.Key.ID()
	m.cert = m.creds.Certificate()
	if mc.CertFile != "" || mc.KeyFile != "" {
		c, err := tls.LoadX509KeyPair(mc.CertFile, mc.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("dashboard: members: the listener's certificate: %w", err)
		}
		m.cert = c
	}
	if m.account == "" {
		u, err := user.Current()
		if err != nil {
			return nil, fmt.Errorf("dashboard: members: the account whose transfers these are: %w", err)
		}
		m.account = u.Username
	}
	m.secret = make([]byte, 32)
	_, _ = rand.Read(m.secret)
	ln, err := net.Listen("tcp", mc.Listen)
	if err != nil {
		return nil, fmt.Errorf("dashboard: members: %w", err)
	}
	m.ln = ln
	return m, nil
}

// tlsConfig asks for a client certificate and lets the handshake finish
// whatever comes: the requests are judged, in words (admit).
func (m *members) tlsConfig() *tls.Config {
	return &tls.Config{
		Certificates:           []tls.Certificate{m.cert},
		MinVersion:             tls.VersionTLS13,
		ClientAuth:             tls.RequestClientCert,
		SessionTicketsDisabled: true,
	}
}

// member is a member signed on, as its requests' contexts carry it.
type member struct {
	chain *chain.Result
	certs []*x509.Certificate
	token string // its token for changes
}

type memberKey struct{}

// memberOf is the member a request came from, nil for the local user.
func memberOf(ctx context.Context) *member {
	m, _ := ctx.Value(memberKey{}).(*member)
	return m
}

// check says who certs prove, or why they are refused.
func (m *members) check(certs []*x509.Certificate) (*chain.Result, *Refusal) {
	if len(certs) == 0 {
		return nil, &Refusal{Reason: RefusedNoCert}
	}
	res, err := m.trust.VerifyCertificates(certs)
	if err != nil {
		return nil, &Refusal{Reason: chainReason(err), Detail: err.Error(), Cause: err}
	}
	if res.Role != ca.User {
		return nil, &Refusal{Reason: RefusedNotUser, Detail: fmt.Sprintf("%s is a %s's certificate", res.Subject(), res.Role)}
	}
	if !res.Allows(DashboardService, m.node) {
		return nil, &Refusal{Reason: RefusedRestricted, Detail: fmt.Sprintf("the proxy of %s is restricted to %s; the dashboard needs %q or %q",
			res.Subject(), strings.Join(res.Restriction, ", "), DashboardService, DashboardService+"@"+m.node.String())}
	}
	return res, nil
}

// tokenFor is the token of the member whose chain starts with leaf.
func (m *members) tokenFor(leaf *x509.Certificate) string {
	h := hmac.New(sha256.New, m.secret)
	h.Write(leaf.Raw)
	return hex.EncodeToString(h.Sum(nil))
}

// admit says who r comes from, or why it is refused: the chain, then for
// a change the member's token and its right to change.
func (m *members) admit(r *http.Request) (*member, *Refusal) {
	if r.TLS == nil {
		return nil, &Refusal{Reason: RefusedNoCert, Detail: "not over TLS"}
	}
	certs := r.TLS.PeerCertificates
	res, ref := m.check(certs)
	if ref != nil {
		return nil, ref
	}
	who := &member{chain: res, certs: certs, token: m.tokenFor(certs[0])}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return who, nil
	}
	h := r.Header.Get(TokenHeader)
	switch {
	case h == "":
		return nil, &Refusal{Reason: RefusedNoHeader, Detail: res.Subject()}
	case !sameToken(h, who.token):
		return nil, &Refusal{Reason: RefusedWrongToken, Detail: res.Subject()}
	}
	if why := m.mayChange(res); why != "" {
		return nil, &Refusal{Reason: RefusedMemberChange, Detail: why}
	}
	return who, nil
}

// mayChange says why the member res may not change transfers, or "" if
// the grid-mapfile maps it to the dashboard's account (read anew each
// time: an edit applies to the next request).
func (m *members) mayChange(res *chain.Result) string {
	dn := gexec.SubjectDN(res.EndEntity)
	if m.mapFile == "" {
		return fmt.Sprintf("%q may look only: no grid-mapfile maps members to %s here", dn, m.account)
	}
	f, err := os.Open(m.mapFile)
	if err != nil {
		return fmt.Sprintf("the grid-mapfile cannot be read: %v", err)
	}
	defer f.Close()
	mf, err := gexec.ParseMapfile(f, m.mapFile)
	if err != nil {
		return fmt.Sprintf("the grid-mapfile cannot be used: %v", err)
	}
	accts := mf.Accounts(res.EndEntity)
	switch {
	case slices.Contains(accts, m.account):
		return ""
	case len(accts) == 0:
		return fmt.Sprintf("subject %q is not in the grid-mapfile %s", dn, m.mapFile)
	}
	return fmt.Sprintf("subject %q maps to %s, not to %s, whose transfers these are", dn, strings.Join(accts, ","), m.account)
}

// memberGuard admits members (admit) and refuses the rest in words on
// both ends.
func (s *Server) memberGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, ref := s.members.admit(r)
		if ref != nil {
			s.refuse(w, r, ref)
			return
		}
		secureHeaders(w)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), memberKey{}, who)))
	})
}

// MembersAddr is where members reach the dashboard (nil without
// MembersConfig.Listen).
func (s *Server) MembersAddr() net.Addr {
	if s.members == nil {
		return nil
	}
	return s.members.ln.Addr()
}

// MembersURL is the address members open (empty without
// MembersConfig.Listen).
func (s *Server) MembersURL() string {
	if s.members == nil {
		return ""
	}
	return "https://" + s.members.ln.Addr().String() + "/"
}

// membersHandler is the members' HTTP handler (memberGuard before the
// routes); a request without TLS is refused.
func (s *Server) membersHandler() http.Handler {
	return s.memberGuard(s.routes())
}
