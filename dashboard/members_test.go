package dashboard

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/chain"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
)

// memberDash is a dashboard open to the members of a test grid, served
// on loopback; its own certificate is the node dashnode's.
type memberDash struct {
	s    *Server
	log  *syncBuffer
	grid *pkitest.Grid
	self *pki.Credentials
}

func newMemberDash(t *testing.T, mapFile string) *memberDash {
	t.Helper()
	g := pkitest.New(t, "testgrid")
	self := g.Member(t, ca.Node, "dashnode")
	log := &syncBuffer{}
	s, err := New(Config{Control: "@gridlink-dash-test-none", Hubs: []string{}, Interval: 50 * time.Millisecond,
		Logger:  slog.New(slog.NewTextHandler(log, nil)),
		Members: MembersConfig{Listen: "127.0.0.1:0", Creds: self, MapFile: mapFile}})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	return &memberDash{s: s, log: log, grid: g, self: self}
}

// serve runs s until the test ends.
func serve(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

// userCert is a user's certificate as a TLS client presents it.
func userCert(u *proxy.Credential) *tls.Certificate {
	c := &tls.Certificate{PrivateKey: u.Key, Leaf: u.Chain[0]}
	for _, x := range u.Chain {
		c.Certificate = append(c.Certificate, x.Raw)
	}
	return c
}

// credsCert is a node's, proxy's or outsider's credentials as a TLS
// client presents them.
func credsCert(c *pki.Credentials) *tls.Certificate {
	tc := c.Certificate()
	return &tls.Certificate{Certificate: tc.Certificate, PrivateKey: tc.PrivateKey}
}

// member is an HTTPS client presenting cert (none if nil) that admits
// only the dashboard's own certificate: a chain the grid validates, of
// the node whose key it expects.
func (d *memberDash) member(t *testing.T, cert *tls.Certificate) *http.Client {
	t.Helper()
	want := d.self.Key.ID()
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, // verified below, by the grid's CA
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			res, err := d.grid.Trust.Verify(raw)
			if err != nil {
				return err
			}
			id, err := res.NodeID()
			if err != nil || id != want {
				return fmt.Errorf("the dashboard presents %s (%v), not dashnode", res.Subject(), err)
			}
			return nil
		}}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func (d *memberDash) url(path string) string {
	return "https://" + d.s.MembersAddr().String() + path
}

// get fetches path; it returns the status and body.
func (d *memberDash) get(t *testing.T, c *http.Client, path string) (int, string) {
	t.Helper()
	resp, err := c.Get(d.url(path))
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post sends body to path with the token header tok (none if empty).
func (d *memberDash) post(t *testing.T, c *http.Client, path, tok, ctype, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", d.url(path), strings.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	if tok != "" {
		req.Header.Set(TokenHeader, tok)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// pageToken is the token the page gives its script.
func pageToken(t *testing.T, page string) string {
	t.Helper()
	const meta = `<meta name="gridlink-token" content="`
	i := strings.Index(page, meta)
	if i < 0 {
		t.Fatalf("no token in the page:\n%s", page)
	}
	rest := page[i+len(meta):]
	return rest[:strings.IndexByte(rest, '"')]
}

// refusedBoth checks that a refusal names reason to the client and, with
// the same detail, in the dashboard's log written since mark.
func (d *memberDash) refusedBoth(t *testing.T, what string, code int, body, reason string, mark int) {
	t.Helper()
	if code != http.StatusForbidden || !strings.Contains(body, "refused: "+reason) {
		t.Errorf("%s: %d %q; want 403 naming %q", what, code, body, reason)
		return
	}
	logged := d.log.String()[mark:]
	detail := ""
	if i := strings.Index(body, reason+" ("); i >= 0 {
		detail = strings.TrimSuffix(strings.TrimSpace(body[i+len(reason)+2:]), ")")
	}
	if !strings.Contains(logged, strconv.Quote(reason)) && !strings.Contains(logged, reason) {
		t.Errorf("%s: the log does not name %q:\n%s", what, reason, logged)
	}
	if detail != "" && !strings.Contains(logged, strconv.Quote(detail)) && !strings.Contains(logged, "detail="+detail) {
		t.Errorf("%s: the log does not give the detail %q:\n%s", what, detail, logged)
	}
}

// Members sign on with a user's certificate or a proxy of one (also one
// restricted to the dashboard, at any node or at this one): they see the
// page, the state and the event stream, read only, and check the
// dashboard's certificate with the grid's CA.
func TestMembersAdmitted(t *testing.T) {
	d := newMemberDash(t, "")
	alice := d.grid.User(t, "alice")
	node := d.self.Key.ID()
	for _, c := range []struct {
		name string
		cert *tls.Certificate
	}{
		{"a user's certificate", userCert(alice)},
		{"a proxy", credsCert(d.grid.Proxy(t, alice, proxy.Options{}))},
		{"a proxy of a proxy", credsCert(d.grid.Proxy(t, must(t, func() (*proxy.Credential, error) { return proxy.New(alice, proxy.Options{}) }), proxy.Options{}))},
		{"a proxy restricted to the dashboard", credsCert(d.grid.Proxy(t, alice, proxy.Options{Restrict: []string{"dashboard"}}))},
		{"a proxy restricted to this dashboard", credsCert(d.grid.Proxy(t, alice, proxy.Options{Restrict: []string{"dashboard@" + node.String()}}))},
		{"a proxy restricted to exec and the dashboard", credsCert(d.grid.Proxy(t, alice, proxy.Options{Restrict: []string{"exec", "dashboard"}}))},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := d.member(t, c.cert)
			code, page := d.get(t, cl, "/")
			if code != http.StatusOK {
				t.Fatalf("GET /: %d %q", code, page)
			}
			if !strings.Contains(page, "signed on as CN=alice,OU=user,O=testgrid") || !strings.Contains(page, `name="gridlink-read-only" content="true"`) || !strings.Contains(page, `<form id="start" hidden>`) {
				t.Errorf("the page does not show alice signed on, read only:\n%s", page)
			}
			if tok := pageToken(t, page); tok == d.s.token || len(tok) != 64 {
				t.Errorf("the member's page token %q: want its own, not the owner's", tok)
			}
			for _, path := range []string{"/api/state", "/static/app.js", "/static/style.css"} {
				if code, body := d.get(t, cl, path); code != http.StatusOK {
					t.Errorf("GET %s: %d %q", path, code, body)
				}
			}
			ev := d.events(t, cl)
			select {
			case e := <-ev:
				if e.name != "state" {
					t.Errorf("the first event: %+v", e)
				}
			case <-time.After(within):
				t.Fatal("no state event")
			}
		})
	}
	if strings.Contains(d.log.String(), "refused") {
		t.Errorf("members refused:\n%s", d.log)
	}
}

func must[T any](t *testing.T, f func() (T, error)) T {
	t.Helper()
	v, err := f()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

type event struct{ name, data string }

// events reads the event stream at the members' listener until it ends.
func (d *memberDash) events(t *testing.T, c *http.Client) <-chan event {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx)
	req, _ := http.NewRequestWithContext(ctx, "GET", d.url("/events"), nil)
	hc := *c
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("events: %s %q", resp.Status, b)
	}
	ch := make(chan event, 256)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-done })
	go func() {
		defer close(done)
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		name := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				select {
				case ch <- event{name, strings.TrimPrefix(line, "data: ")}:
				default: // a slow reader misses states, as a page would
				}
			}
		}
	}()
	return ch
}

// What the grid must refuse, named on both ends: the seven outsiders of
// pkitest (another CA, expired, revoked, tampered, a proxy past its
// lifetime, a proxy signed by the wrong user, self-signed), no
// certificate, a node's certificate, an independent proxy and proxies
// restricted elsewhere; the owner's token opens nothing here.
func TestMembersRefused(t *testing.T) {
	d := newMemberDash(t, "")
	want := map[error]string{
		chain.ErrUnknownCA: "not signed by the grid CA",
		chain.ErrExpired:   "certificate expired",
		chain.ErrRevoked:   "certificate revoked",
		chain.ErrSignature: "not signed by the grid CA (a bad signature)",
		chain.ErrIssuer:    "a broken chain (a proxy not issued by the certificate after it)",
	}
	type refused struct {
		name   string
		cert   *tls.Certificate
		reason string
		cause  error
	}
	var cases []refused
	outsiders := d.grid.Outsiders(t)
	if len(outsiders) != 7 {
		t.Fatalf("%d outsiders; want pkitest's seven", len(outsiders))
	}
	for _, o := range outsiders {
		if want[o.Want] == "" {
			t.Fatalf("outsider %q: no reason expected for %v", o.Case, o.Want)
		}
		cases = append(cases, refused{o.Case, credsCert(o.Creds), want[o.Want], o.Want})
	}
	alice := d.grid.User(t, "alice")
	other, _ := identity.NewKey()
	indep := must(t, func() (*proxy.Credential, error) { return proxy.New(alice, proxy.Options{Independent: true}) })
	cases = append(cases,
		refused{"no certificate", nil, RefusedNoCert, nil},
		refused{"a node's certificate", credsCert(d.grid.Member(t, ca.Node, "somenode")), RefusedNotUser, nil},
		refused{"a hub's certificate", credsCert(d.grid.Member(t, ca.Hub, "somehub")), RefusedNotUser, nil},
		refused{"a proxy restricted to exec", credsCert(d.grid.Proxy(t, alice, proxy.Options{Restrict: []string{"exec"}})), RefusedRestricted, nil},
		refused{"a proxy restricted to another node's dashboard", credsCert(d.grid.Proxy(t, alice, proxy.Options{Restrict: []string{"dashboard@" + other.ID().String()}})), RefusedRestricted, nil},
		refused{"an independent proxy", credsCert(pki.Unchecked(pkitest.ProxyKey(t, indep), indep.Chain, d.grid.Trust)), "a proxy policy the grid refuses", chain.ErrPolicy},
	)
	for _, c := range cases {
		cl := d.member(t, c.cert)
		for _, path := range []string{"/", "/api/state", "/events", "/static/app.js"} {
			mark := len(d.log.String())
			code, body := d.get(t, cl, path)
			d.refusedBoth(t, c.name+" GET "+path, code, body, c.reason, mark)
		}
		mark := len(d.log.String())
		code, body := d.post(t, cl, "/api/transfers", d.s.token, "application/json", `{"srcs":["a:x"],"dst":"b:y"}`)
		d.refusedBoth(t, c.name+" POST", code, body, c.reason, mark)
		if c.reason == RefusedRestricted && !strings.Contains(body, "restricted to ") {
			t.Errorf("%s: %q does not say what the proxy is restricted to", c.name, body)
		}
		if c.cause != nil {
			// the dashboard decides the reason by the chain's error
			_, ref := d.s.members.check(certsOf(t, c.cert))
			if ref == nil || !errors.Is(ref, c.cause) {
				t.Errorf("%s: refusal %v; want one caused by %v", c.name, ref, c.cause)
			}
		}
	}
	// the owner's token in the address does not sign anyone on here
	mark := len(d.log.String())
	code, body := d.get(t, d.member(t, nil), "/?token="+d.s.token)
	d.refusedBoth(t, "the owner's token", code, body, RefusedNoCert, mark)
	if strings.Contains(d.log.String(), d.s.token) {
		t.Error("the log shows the owner's token")
	}
}

func certsOf(t *testing.T, c *tls.Certificate) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for _, der := range c.Certificate {
		x, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, x)
	}
	return out
}
