package hubserver

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/status"
	"github.com/gridlink/gridlink/wire"
)

// badNames are names no node or hub may take (identity.CheckName; issue
// 32): a squatter on NAME.grid, one too long for a message, one that
// rewrites the operator's terminal, one with a space, one that shadows a
// lookup by ID.
func badNames() []string {
	return []string{"c.grid", strings.Repeat("x", 300), "\x1b[2Jowned", "a b", identity.KeyFromSeed(make([]byte, 32)).ID().String()}
}

// helloAs runs a link's handshake and hello with h as role under name,
// as a node that skipped its own check would (or one older than it):
// the error is what the node reads back.
func helloAs(t *testing.T, c *pki.Credentials, h *Hub, role, name string) error {
	t.Helper()
	return sendHello(t, c, h, "", func(*hub.Secured) *wire.Hello {
		return &wire.Hello{Role: role, Machine: identity.Machine{ID: c.Key.ID(), Name: name}, Version: wire.Version}
	})
}

// A node's name that is not a name is refused before the node dials a
// hub; a hello that gives one anyway (a node older than the check, or
// one that skips it, as a hub or as a node) is refused for good, the
// name and why named on both ends and escaped in both; a hub is not
// started under one.
func TestBadNameRefused(t *testing.T) {
	a, alog := namedHub(t, "a", creds(t))
	t.Run("NodeUpFront", func(t *testing.T) {
		for _, name := range badNames() {
			_, err := attachAs(t, name, creds(t), a)
			var re *hub.RefusedError
			if !errors.Is(err, identity.ErrBadName) || errors.As(err, &re) {
				t.Errorf("attaching as %q: %v, want the node's own refusal of the name", name, err)
			}
		}
	})
	for _, role := range []string{"node", "hub"} {
		t.Run("Hello/"+role, func(t *testing.T) {
			for _, name := range badNames() {
				if role == "hub" && len(name) > identity.MaxName+1 {
					continue // a hub's hello never carried more (wire), nor does it now
				}
				err := helloAs(t, creds(t), a, role, name)
				var re *hub.RefusedError
				if !errors.As(err, &re) || !errors.Is(err, identity.ErrBadName) || !errors.Is(err, hub.ErrPermanent) {
					t.Fatalf("hello as %s %q: %v, want a permanent refusal of the name", role, name, err)
				}
				quoted := strconv.QuoteToASCII(name)
				for _, want := range []string{identity.ErrBadName.Error(), quoted[:min(len(quoted), 20)]} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("the refused end's error %q does not say %q", err, want)
					}
				}
				if strings.ContainsAny(err.Error(), "\x1b\n") {
					t.Errorf("the refused end's error is not escaped: %q", err)
				}
				alog.wait(t, "the refusing hub's log", "refused", re.Reason)
			}
			wantRefused(t, a, "connection", status.RefusedBadName)
		})
	}
	alog.mu.Lock()
	for _, l := range alog.lines {
		if strings.Contains(l, "\x1b") {
			t.Errorf("the hub's log holds the escape sequence: %q", l)
		}
	}
	alog.mu.Unlock()
	if len(a.Nodes()) != 0 {
		t.Errorf("nodes admitted: %v", a.Nodes())
	}
	for _, name := range badNames() {
		if _, err := New(Config{Name: name, Creds: creds(t), Listen: "127.0.0.1:0"}); !errors.Is(err, identity.ErrBadName) {
			t.Errorf("a hub called %q: %v", name, err)
		}
	}
}
