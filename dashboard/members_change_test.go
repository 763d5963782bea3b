package dashboard

import (
	"encoding/json"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
)

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
