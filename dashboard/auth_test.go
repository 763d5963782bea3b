package dashboard

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// newBare is a dashboard that serves no one's agent or hubs (the auth
// tests need only its handler).
func newBare(t *testing.T) (*Server, *syncBuffer) {
	t.Helper()
	log := &syncBuffer{}
	s, err := New(Config{Control: "@gridlink-dash-test-none", Hubs: []string{}, Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.ln.Close(); s.close() })
	return s, log
}

// do runs a request through the handler with the dashboard's Host.
func do(s *Server, req *http.Request) (*http.Response, string) {
	if req.Host == "example.com" || req.Host == "" {
		req.Host = s.Addr().String()
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	resp := w.Result()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// Requests without the token, with a wrong one, with it only in the
// cookie for a change, or for another Host are refused with 403 and the
// reason, which the dashboard logs in the same words; the address with
// the token signs on (an HttpOnly SameSite=Strict cookie, a redirect
// that drops the token), and the cookie then opens the page, whose
// script gets the token for its changes.
func TestAuth(t *testing.T) {
	s, log := newBare(t)
	cookie := &http.Cookie{Name: CookieName, Value: s.token}
	wrong := &http.Cookie{Name: CookieName, Value: strings.Repeat("0", len(s.token))}
	refused := []struct {
		name   string
		req    func() *http.Request
		reason string
	}{
		{"no token", func() *http.Request { return httptest.NewRequest("GET", "/", nil) }, RefusedNoToken},
		{"no token for the state", func() *http.Request { return httptest.NewRequest("GET", "/api/state", nil) }, RefusedNoToken},
		{"no token for the events", func() *http.Request { return httptest.NewRequest("GET", "/events", nil) }, RefusedNoToken},
		{"no token for the script", func() *http.Request { return httptest.NewRequest("GET", "/static/app.js", nil) }, RefusedNoToken},
		{"wrong token in the address", func() *http.Request { return httptest.NewRequest("GET", "/?token=abc", nil) }, RefusedWrongToken},
		{"wrong cookie", func() *http.Request {
			r := httptest.NewRequest("GET", "/api/state", nil)
			r.AddCookie(wrong)
			return r
		}, RefusedWrongToken},
		{"a short cookie", func() *http.Request {
			r := httptest.NewRequest("GET", "/api/state", nil)
			r.AddCookie(&http.Cookie{Name: CookieName, Value: s.token[:10]})
			return r
		}, RefusedWrongToken},
		{"a change with the cookie only", func() *http.Request {
			r := httptest.NewRequest("POST", "/api/transfers", strings.NewReader(`{}`))
			r.AddCookie(cookie)
			return r
		}, RefusedNoHeader},
		{"a change with the token in the address", func() *http.Request {
			return httptest.NewRequest("POST", "/api/transfers/action?token="+s.token, strings.NewReader(`{}`))
		}, RefusedNoHeader},
		{"a change with a wrong header", func() *http.Request {
			r := httptest.NewRequest("POST", "/api/transfers", strings.NewReader(`{}`))
			r.AddCookie(cookie)
			r.Header.Set(TokenHeader, "x"+s.token[1:])
			return r
		}, RefusedWrongToken},
		{"another host (DNS rebinding)", func() *http.Request {
			r := httptest.NewRequest("GET", "/api/state", nil)
			r.AddCookie(cookie)
			r.Host = "attacker.example:" + s.port
			return r
		}, RefusedHost},
		{"another port", func() *http.Request {
			r := httptest.NewRequest("GET", "/api/state", nil)
			r.AddCookie(cookie)
			r.Host = "127.0.0.1:1"
			return r
		}, RefusedHost},
	}
	for _, c := range refused {
		resp, body := do(s, c.req())
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, c.reason) {
			t.Errorf("%s: %s %q; want 403 naming %q", c.name, resp.Status, body, c.reason)
		}
		if !strings.Contains(log.String(), c.reason) {
			t.Errorf("%s: the log does not name %q:\n%s", c.name, c.reason, log)
		}
		if strings.Contains(body, s.token) {
			t.Errorf("%s: the refusal shows the token", c.name)
		}
	}

	// signing on
	resp, _ := do(s, httptest.NewRequest("GET", "/?token="+s.token, nil))
	var got *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == CookieName {
			got = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Errorf("the address with the token: %s to %q; want 303 to /", resp.Status, resp.Header.Get("Location"))
	}
	if got == nil || got.Value != s.token || !got.HttpOnly || got.SameSite != http.SameSiteStrictMode || got.Path != "/" {
		t.Errorf("cookie %+v; want the token, HttpOnly, SameSite=Strict, Path=/", got)
	}
	for _, path := range []string{"/", "/api/state", "/static/app.js", "/static/style.css"} {
		r := httptest.NewRequest("GET", path, nil)
		r.AddCookie(cookie)
		resp, body := do(s, r)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s with the cookie: %s %q", path, resp.Status, body)
		}
		if path == "/" && !strings.Contains(body, `content="`+s.token+`"`) {
			t.Errorf("the page does not give its script the token")
		}
		if resp.Header.Get("Content-Security-Policy") == "" || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: no CSP or frame denial: %v", path, resp.Header)
		}
	}
	// localhost names the dashboard too; a change with the header passes
	// the guard (and fails on its body)
	r := httptest.NewRequest("POST", "/api/transfers", strings.NewReader(`{"bogus":1}`))
	r.Host = "localhost:" + s.port
	r.Header.Set(TokenHeader, s.token)
	if resp, body := do(s, r); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "unknown field") {
		t.Errorf("a change with the header: %s %q; want 400 for its body", resp.Status, body)
	}
}

// The dashboard listens on loopback only.
func TestListenLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "[::]:0"} {
		if _, err := New(Config{Listen: addr}); !errors.Is(err, ErrNotLoopback) {
			t.Errorf("Listen %q: %v; want ErrNotLoopback", addr, err)
		}
	}
	s, err := New(Config{Listen: "[::1]:0", Hubs: []string{}})
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	s.ln.Close()
	s.close()
}

func TestSameToken(t *testing.T) {
	tok := newToken()
	if len(tok) != 64 || tok == newToken() {
		t.Fatalf("token %q: want 64 hex digits, fresh each time", tok)
	}
	for _, c := range []struct {
		got  string
		same bool
	}{{tok, true}, {"", false}, {tok[:63], false}, {tok + "0", false}, {strings.ToUpper(tok), tok == strings.ToUpper(tok)}} {
		if sameToken(c.got, tok) != c.same {
			t.Errorf("sameToken(%q) = %v", c.got, !c.same)
		}
	}
}
