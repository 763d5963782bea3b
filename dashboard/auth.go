package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/gridlink/gridlink/peercred"
)

// Who may use the dashboard: the user who started it, on loopback (this
// file), and, only if asked for, the grid's members with their
// certificates, on a listener of their own (members.go).
//
//   - It listens on loopback only (Config.Listen must name a loopback
//     address): nothing off the host reaches it.
//   - Every request carries the token (random, 32 bytes, printed by
//     `gridlink dashboard` in the address it opens): in the address once
//     (?token=T, answered by a cookie and a redirect to the same page
//     without it), then in the cookie (CookieName: HttpOnly,
//     SameSite=Strict, Path=/), compared in constant time. Changes
//     (POST) need it in the TokenHeader header as well, which the page's
//     script sends and a cross-site form cannot (so no CSRF); the page
//     learns it from the one document the cookie fetches.
//   - The Host header must name the listening address (loopback by
//     number, or localhost): a page of another site that rebinds its DNS
//     name to 127.0.0.1 is refused.
//   - On Linux, a connection from another uid is refused even with the
//     token (the kernel's socket table says whose it is: package
//     peercred, sock_diag), and so is one whose uid the kernel does not
//     tell; elsewhere the token alone keeps other users out.
//   - Behind it, the agent's control socket admits only the agent's own
//     uid and root (SO_PEERCRED): a dashboard another user started
//     cannot drive this user's agent.
//
// A refused request gets 403 and the reason in plain words (Refusal), and
// the dashboard logs the same words.

// CookieName is the cookie that carries the token once the address with
// it was opened.
const CookieName = "gridlink_dashboard"

// TokenHeader carries the token on the page's requests that change
// something (POST).
const TokenHeader = "X-Gridlink-Token"

// TokenParam is the query parameter of the address `gridlink dashboard`
// prints and opens.
const TokenParam = "token"

// Reasons a request is refused (Refusal.Reason).
const (
	RefusedNoToken     = "no token: open the address gridlink dashboard printed"
	RefusedWrongToken  = "wrong token"
	RefusedNoHeader    = "a change without the token header (" + TokenHeader + ")"
	RefusedHost        = "a Host header that is not this dashboard's address"
	RefusedOtherUser   = "a connection from another user"
	RefusedNotLoopback = "not a loopback address"
)

// Refusal is a request the dashboard refused, and why.
type Refusal struct {
	Reason string
	Detail string // the facts: the Host given, the uids, the chain's fault
	Cause  error  // what refused it, if an error did (a member's chain: package chain's *Error)
}

// Unwrap is the cause, so errors.Is(ref, chain.ErrRevoked) works.
func (r *Refusal) Unwrap() error { return r.Cause }

func (r *Refusal) Error() string {
	if r.Detail == "" {
		return "dashboard: refused: " + r.Reason
	}
	return "dashboard: refused: " + r.Reason + " (" + r.Detail + ")"
}

// ErrNotLoopback is a Config.Listen that is not a loopback address.
var ErrNotLoopback = errors.New("dashboard: listens on loopback only (127.0.0.1, ::1 or localhost)")

// newToken is 32 random bytes in hex.
func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sameToken compares a presented token with the dashboard's in constant
// time (for tokens of its length).
func sameToken(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// authorize says why r is refused, or nil. A GET with the token in the
// address is admitted (the caller sets the cookie).
func (s *Server) authorize(r *http.Request) *Refusal {
	if !s.hostOK(r.Host) {
		return &Refusal{Reason: RefusedHost, Detail: fmt.Sprintf("Host %q", r.Host)}
	}
	if p, ok := r.Context().Value(peerUIDKey{}).(peerUID); ok {
		switch {
		case p.err != nil && !errors.Is(p.err, peercred.ErrUnsupported):
			return &Refusal{Reason: RefusedOtherUser, Detail: fmt.Sprintf("uid unknown (%v); the dashboard runs as uid %d", p.err, os.Geteuid())}
		case p.err == nil && p.uid != os.Geteuid():
			return &Refusal{Reason: RefusedOtherUser, Detail: fmt.Sprintf("uid %d; the dashboard runs as uid %d", p.uid, os.Geteuid())}
		}
	}
	if q := r.URL.Query().Get(TokenParam); q != "" && r.Method == http.MethodGet {
		if !sameToken(q, s.token) {
			return &Refusal{Reason: RefusedWrongToken}
		}
		return nil
	}
	c, err := r.Cookie(CookieName)
	h := r.Header.Get(TokenHeader)
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		if h == "" {
			return &Refusal{Reason: RefusedNoHeader}
		}
		if !sameToken(h, s.token) {
			return &Refusal{Reason: RefusedWrongToken}
		}
		return nil
	case err == nil:
		if !sameToken(c.Value, s.token) {
			return &Refusal{Reason: RefusedWrongToken}
		}
		return nil
	case h != "":
		if !sameToken(h, s.token) {
			return &Refusal{Reason: RefusedWrongToken}
		}
		return nil
	}
	return &Refusal{Reason: RefusedNoToken}
}

// hostOK says whether a Host header names the listening address.
func (s *Server) hostOK(host string) bool {
	_, port, err := net.SplitHostPort(host)
	if err != nil || port != s.port {
		return false
	}
	h := strings.TrimSuffix(strings.TrimPrefix(host[:len(host)-len(port)-1], "["), "]")
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// guard refuses what authorize refuses, in words on both ends, and sets
// the cookie for an address with the token (redirecting to it without).
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ref := s.authorize(r); ref != nil {
			s.refuse(w, r, ref)
			return
		}
		if r.URL.Query().Has(TokenParam) && r.Method == http.MethodGet {
			http.SetCookie(w, &http.Cookie{Name: CookieName, Value: s.token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			u := *r.URL
			q := u.Query()
			q.Del(TokenParam)
			u.RawQuery = q.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		secureHeaders(w)
		next.ServeHTTP(w, r)
	})
}

// refuse answers a refused request with 403 and the reason, and logs the
// same words.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, ref *Refusal) {
	s.log.Warn("dashboard: refused", "reason", ref.Reason, "detail", ref.Detail, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusForbidden)
	fmt.Fprintln(w, ref.Error())
}

// secureHeaders are an admitted request's: not cached, not framed, the
// page's own resources only.
func secureHeaders(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
}

// peerUIDKey keys the uid of a connection's peer (peerUID) in its
// requests' contexts.
type peerUIDKey struct{}

// peerUID is whose a connection is, as the kernel tells (package
// peercred; ErrUnsupported off Linux).
type peerUID struct {
	uid int
	err error
}

// peerContext is the HTTP server's ConnContext: it records whose c is.
func peerContext(ctx context.Context, c net.Conn) context.Context {
	uid, err := peercred.UID(c)
	return context.WithValue(ctx, peerUIDKey{}, peerUID{uid: uid, err: err})
}
