package dashboard

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink"
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

// A member changes no transfer unless the grid-mapfile maps its subject
// to the dashboard's account; changes need the member's own token in the
// header (a form of another site, the owner's token, another member's
// token are refused), in words on both ends.
func TestMemberChanges(t *testing.T) {
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	mapFile := filepath.Join(t.TempDir(), "grid-mapfile")
	d := newMemberDash(t, mapFile)
	if err := os.WriteFile(mapFile, []byte(`"/O=testgrid/OU=user/CN=alice" nobody
"/O=testgrid/OU=user/CN=carol" daemon,`+me.Username+`
`), 0o644); err != nil {
		t.Fatal(err)
	}
	alice, bob, carol := d.grid.User(t, "alice"), d.grid.User(t, "bob"), d.grid.User(t, "carol")
	ac, bc, cc := d.member(t, userCert(alice)), d.member(t, userCert(bob)), d.member(t, credsCert(d.grid.Proxy(t, carol, proxy.Options{})))
	token := func(c *http.Client) (string, string) {
		t.Helper()
		code, page := d.get(t, c, "/")
		if code != http.StatusOK {
			t.Fatalf("GET /: %d %q", code, page)
		}
		return pageToken(t, page), page
	}
	at, page := token(ac)
	if !strings.Contains(page, `content="true"`) {
		t.Error("alice's page is not read only")
	}
	bt, _ := token(bc)
	ct, page := token(cc)
	if !strings.Contains(page, `name="gridlink-read-only" content="false"`) || strings.Contains(page, `<form id="start" hidden>`) {
		t.Errorf("carol's page (mapped to %s) is read only:\n%s", me.Username, page)
	}
	if at == bt || at == ct {
		t.Error("two members share a token")
	}
	start := `{"srcs":["srcsvc:a"],"dst":"dstsvc:a"}`
	for _, c := range []struct {
		name        string
		cl          *http.Client
		path, tok   string
		ctype, body string
		reason      string
		detail      string
	}{
		{"alice, mapped to another account", ac, "/api/transfers", at, "application/json", start, RefusedMemberChange, "maps to nobody, not to " + me.Username},
		{"alice's action", ac, "/api/transfers/action", at, "application/json", `{"action":"cancel","ids":["1"]}`, RefusedMemberChange, "maps to nobody"},
		{"bob, not mapped", bc, "/api/transfers", bt, "application/json", start, RefusedMemberChange, "is not in the grid-mapfile"},
		{"a form of another site (carol's browser)", cc, "/api/transfers", "", "application/x-www-form-urlencoded", "srcs=a", RefusedNoHeader, ""},
		{"carol with the owner's token", cc, "/api/transfers", d.s.token, "application/json", start, RefusedWrongToken, ""},
		{"carol with alice's token", cc, "/api/transfers/action", at, "application/json", `{"action":"cancel","ids":["1"]}`, RefusedWrongToken, ""},
		{"alice with carol's token", ac, "/api/transfers", ct, "application/json", start, RefusedWrongToken, ""},
	} {
		mark := len(d.log.String())
		code, body := d.post(t, c.cl, c.path, c.tok, c.ctype, c.body)
		d.refusedBoth(t, c.name, code, body, c.reason, mark)
		if !strings.Contains(body, c.detail) {
			t.Errorf("%s: %q does not say %q", c.name, body, c.detail)
		}
	}
	var st State
	_, body := d.get(t, ac, "/api/state")
	if err := json.Unmarshal([]byte(body), &st); err != nil || len(st.Transfers) != 0 {
		t.Errorf("after the refusals: %d transfers, %v", len(st.Transfers), err)
	}
	// carol, mapped to the account, passes the guard: her requests reach
	// the transfers (a bad body, an unknown transfer)
	if code, body := d.post(t, cc, "/api/transfers", ct, "application/json", `{"bogus":1}`); code != http.StatusBadRequest || !strings.Contains(body, "unknown field") {
		t.Errorf("carol's change: %d %q; want 400 for its body", code, body)
	}
	var res ActionResult
	code, body := d.post(t, cc, "/api/transfers/action", ct, "application/json", `{"action":"cancel","ids":["7"]}`)
	if err := json.Unmarshal([]byte(body), &res); code != http.StatusOK || err != nil || res.Results["7"] != errNoTransfer.Error() {
		t.Errorf("carol's action: %d %q", code, body)
	}
	// the grid-mapfile is read anew: alice mapped now may change
	if err := os.WriteFile(mapFile, []byte(`"/O=testgrid/OU=user/CN=alice" `+me.Username+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := d.post(t, ac, "/api/transfers", at, "application/json", `{"bogus":1}`); code != http.StatusBadRequest {
		t.Errorf("alice mapped: %d %q; want 400 for its body", code, body)
	}
	if !strings.Contains(d.log.String(), "CN=carol") {
		t.Errorf("the log does not say carol acted:\n%s", d.log)
	}
}

// A member revoked while its page is open: the event stream ends with
// the reason, logged the same, and its next request is refused.
func TestMemberRevokedWhileWatching(t *testing.T) {
	d := newMemberDash(t, "")
	alice := d.grid.User(t, "alice")
	cl := d.member(t, credsCert(d.grid.Proxy(t, alice, proxy.Options{})))
	ev := d.events(t, cl)
	first := <-ev
	if first.name != "state" {
		t.Fatalf("first event %+v", first)
	}
	mark := len(d.log.String())
	d.grid.Revoke(t, alice.Chain[0])
	deadline := time.After(within)
	for {
		select {
		case e, ok := <-ev:
			if !ok {
				t.Fatal("the stream ended without saying why")
			}
			if e.name != "refused" {
				continue
			}
			if !strings.Contains(e.data, "certificate revoked") {
				t.Errorf("refused event %q; want it to name the revocation", e.data)
			}
			if !strings.Contains(d.log.String()[mark:], "certificate revoked") {
				t.Errorf("the log does not name the revocation:\n%s", d.log)
			}
			if _, ok := <-ev; ok {
				t.Error("the stream goes on after the refusal")
			}
			mark = len(d.log.String())
			code, body := d.get(t, cl, "/api/state")
			d.refusedBoth(t, "after the revocation", code, body, "certificate revoked", mark)
			return
		case <-deadline:
			t.Fatal("the stream was not ended by the revocation")
		}
	}
}

// Members need a grid: a dashboard of an open grid refuses to open to
// them; from files (the command line's --ca, --crl, --key, --cert) it
// presents the node's certificate. "dashboard" is a restriction proxy
// init accepts.
func TestMembersConfig(t *testing.T) {
	if _, err := New(Config{Hubs: []string{}, Members: MembersConfig{Listen: "127.0.0.1:0"}}); !errors.Is(err, ErrMembersNeedGrid) {
		t.Errorf("members in an open grid: %v; want ErrMembersNeedGrid", err)
	}
	g := pkitest.New(t, "testgrid")
	dir := t.TempDir()
	g.WriteGrid(t, dir)
	key, _ := identity.NewKey()
	files := pkitest.WriteCreds(t, dir, "dashnode", key, []*x509.Certificate{g.Cert(t, ca.Node, "dashnode", key, time.Time{}, 0)})
	log := &syncBuffer{}
	s, err := New(Config{Control: "@gridlink-dash-test-none", Hubs: []string{}, Logger: slog.New(slog.NewTextHandler(log, nil)),
		Copy: gridlink.CopyConfig{Node: gridlink.Config{KeyFile: files.Key, Credentials: gridlink.Credentials{
			CA: filepath.Join(dir, "ca.pem"), CRL: filepath.Join(dir, "crl.pem"), Cert: files.Cert}}},
		Members: MembersConfig{Listen: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	d := &memberDash{s: s, log: log, grid: g, self: pki.Unchecked(key, nil, nil)}
	if code, body := d.get(t, d.member(t, userCert(g.User(t, "alice"))), "/api/state"); code != http.StatusOK {
		t.Errorf("alice at a dashboard configured by files: %d %q", code, body)
	}
	mark := len(log.String())
	code, body := d.get(t, d.member(t, nil), "/api/state")
	d.refusedBoth(t, "no certificate", code, body, RefusedNoCert, mark)
	if !strings.HasPrefix(s.MembersURL(), "https://127.0.0.1:") {
		t.Errorf("MembersURL %q", s.MembersURL())
	}
	for _, e := range []string{"dashboard", "dashboard@" + key.ID().String()} {
		if err := gridlink.CheckRestriction(e); err != nil {
			t.Errorf("CheckRestriction(%q): %v", e, err)
		}
	}
}

// A member cannot pause, cancel or start the user's transfers on a real
// grid: refused in words, the running push goes on untouched.
func TestMemberCannotTouchRunningTransfer(t *testing.T) {
	pg := pkitest.New(t, "testgrid")
	self := pg.Member(t, ca.Node, "dashnode")
	g := newGridWith(t, func(c *Config) { c.Members = MembersConfig{Listen: "127.0.0.1:0", Creds: self} })
	d := &memberDash{s: g.dash, log: g.log, grid: pg, self: self}
	c := g.client(t)
	ch := g.events(t, c)
	randomFile(t, g.src, "b", 8<<20)
	var res map[string]string
	if code := g.post(t, c, "/api/transfers", TransferRequest{Srcs: []string{"srcsvc:b"}, Dst: "dstsvc:b", LimitBytesPerS: 1 << 20}, &res); code != http.StatusOK {
		t.Fatalf("the user's push: %d %v", code, res)
	}
	id := res["id"]
	until(t, ch, "the push moving", func(st State) bool {
		v, _ := transferOf(st, id)
		return v.State == StateRunning && v.Bytes > 0
	})
	alice := d.member(t, userCert(pg.User(t, "alice")))
	code, page := d.get(t, alice, "/")
	if code != http.StatusOK {
		t.Fatalf("alice: %d %q", code, page)
	}
	tok := pageToken(t, page)
	var st State
	if _, body := d.get(t, alice, "/api/state"); json.Unmarshal([]byte(body), &st) != nil || len(st.Transfers) != 1 || st.Transfers[0].ID != id {
		t.Errorf("alice does not see the push: %+v", st.Transfers)
	}
	for _, a := range []string{"pause", "cancel"} {
		mark := len(d.log.String())
		code, body := d.post(t, alice, "/api/transfers/action", tok, "application/json", `{"action":"`+a+`","ids":["`+id+`"]}`)
		d.refusedBoth(t, "alice's "+a, code, body, RefusedMemberChange, mark)
	}
	mark := len(d.log.String())
	code, body := d.post(t, alice, "/api/transfers", tok, "application/json", `{"srcs":["srcsvc:b"],"dst":"dstsvc:c"}`)
	d.refusedBoth(t, "alice's push", code, body, RefusedMemberChange, mark)
	st = g.state(t, c)
	if v, _ := transferOf(st, id); len(st.Transfers) != 1 || v.State != StateRunning || g.srcSvc.Holding() != 0 {
		t.Errorf("after alice's refused changes: %+v, %d held; want the one push running", st.Transfers, g.srcSvc.Holding())
	}
	var ar ActionResult
	if code := g.post(t, c, "/api/transfers/action", ActionRequest{Action: "cancel", IDs: []string{id}}, &ar); code != http.StatusOK || ar.Results[id] != "" {
		t.Errorf("the user's cancel: %d %v", code, ar)
	}
	until(t, ch, "the push cancelled by the user", inState(id, StateCanceled))
}

// For browsers, the listener presents another certificate (an ECDSA one
// naming the host, as a web server's), and admits users' certificates
// for ECDSA keys, which browsers sign with, by the grid's CA all the same.
func TestMembersBrowserCertificate(t *testing.T) {
	g := pkitest.New(t, "testgrid")
	dir := t.TempDir()
	hostKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "frontend"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, hostKey.Public(), hostKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(hostKey)
	certFile, keyFile := filepath.Join(dir, "host.pem"), filepath.Join(dir, "host.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	s, err := New(Config{Control: "@gridlink-dash-test-none", Hubs: []string{}, Logger: slog.New(slog.NewTextHandler(log, nil)),
		Members: MembersConfig{Listen: "127.0.0.1:0", Creds: g.Member(t, ca.Node, "dashnode"), CertFile: certFile, KeyFile: keyFile}})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	host, _ := x509.ParseCertificate(der)
	roots := x509.NewCertPool()
	roots.AddCert(host)
	browser := func(cert *tls.Certificate) *http.Client {
		cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13} // the host's certificate, checked as a browser does
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		tr := &http.Transport{TLSClientConfig: cfg}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	d := &memberDash{s: s, log: log, grid: g}
	erinKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	erin, err := g.CA.Issue(ca.Request{Role: ca.User, Name: "erin", Key: erinKey.Public(), Start: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	code, page := d.get(t, browser(&tls.Certificate{Certificate: [][]byte{erin.Raw}, PrivateKey: erinKey}), "/")
	if code != http.StatusOK || !strings.Contains(page, "signed on as CN=erin,OU=user,O=testgrid") {
		t.Errorf("erin (ECDSA) at the host's certificate: %d %q", code, page)
	}
	if code, body := d.get(t, browser(userCert(g.User(t, "alice"))), "/api/state"); code != http.StatusOK {
		t.Errorf("alice (Ed25519): %d %q", code, body)
	}
	mark := len(log.String())
	code, body := d.get(t, browser(nil), "/")
	d.refusedBoth(t, "a browser without a certificate", code, body, RefusedNoCert, mark)
}
