package vconn

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
)

// logBook collects a component's log lines.
type logBook struct {
	mu    sync.Mutex
	lines []string
}

func (b *logBook) logf(f string, a ...any) {
	b.mu.Lock()
	b.lines = append(b.lines, fmt.Sprintf(f, a...))
	b.mu.Unlock()
}

// wait waits until a line contains all of parts.
func (b *logBook) wait(t *testing.T, what string, parts ...string) {
	t.Helper()
	defer func() {
		if t.Failed() {
			b.mu.Lock()
			defer b.mu.Unlock()
			t.Logf("%s: no log line with %q; lines:\n%s", what, parts, strings.Join(b.lines, "\n"))
		}
	}()
	testwait.Until(t, fmt.Sprintf("%s (a log line with %q)", what, parts), 5*time.Second, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, l := range b.lines {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(l, p)
			}
			if all {
				return true
			}
		}
		return false
	})
}

func certHub(t *testing.T, name string, creds *pki.Credentials, logs *logBook, peers ...string) *hubserver.Hub {
	t.Helper()
	h, err := hubserver.New(hubserver.Config{Name: name, Creds: creds, Listen: "127.0.0.1:0", Peers: peers, Interval: 100 * time.Millisecond, Logf: logs.logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

func certNode(t *testing.T, name string, creds *pki.Credentials, logs *logBook, h *hubserver.Hub) (*Node, error) {
	cfg := Config{Name: name, Creds: creds, ListenAddr: "127.0.0.1", Logf: logs.logf}
	if h != nil {
		cfg.Hubs = []string{h.Addr().String()}
	}
	n, err := Start(context.Background(), cfg)
	if err == nil {
		t.Cleanup(func() { n.Close() })
	}
	return n, err
}

// In a grid with a CA, an outsider of every kind can attach to no hub,
// link no hub and reach no service, and both ends say why.
func TestOutsidersRefused(t *testing.T) {
	g := pkitest.New(t, "testgrid")
	hubLogs, nodeLogs := &logBook{}, &logBook{}
	h := certHub(t, "hub", g.Member(t, ca.Hub, "hub"), hubLogs)
	member, err := certNode(t, "member", g.Member(t, ca.Node, "member"), nodeLogs, h)
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, member, 7)
	target := member.Machine()
	// A hub with a grid hub's certificate that lets anyone attach (a
	// compromised hub): what reaches a service through it is still judged
	// end to end.
	laxKey, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	laxCert := g.Cert(t, ca.Hub, "lax", laxKey, time.Time{}, 0)
	lax := certHub(t, "lax", pki.Unchecked(laxKey, []*x509.Certificate{laxCert}, nil), &logBook{}, h.Addr().String())
	hubLogs.wait(t, "the lax hub linked", "linked to", "lax")

	for _, o := range g.Outsiders(t) {
		t.Run(strings.ReplaceAll(o.Case, " ", "_"), func(t *testing.T) {
			_, verr := g.Trust.VerifyCertificates(o.Chain)
			if !errors.Is(verr, o.Want) {
				t.Fatalf("the grid's verdict on %s: %v, want %v", o.Case, verr, o.Want)
			}
			reason := verr.Error()
			// Attach to the hub.
			_, err := certNode(t, "outsider", o.Creds, &logBook{}, h)
			if !errors.Is(err, pki.ErrDenied) || strings.Count(err.Error(), reason) != 1 {
				t.Errorf("attach: %v; want a refusal saying %q once", err, reason)
			}
			hubLogs.wait(t, "hub's record of the attach", o.Creds.Key.ID().Short(), reason)

			// Link a hub, dialling or dialled.
			outLogs := &logBook{}
			oh := certHub(t, "outhub", pki.Unchecked(o.Creds.Key, o.Chain, g.Trust), outLogs, h.Addr().String())
			outLogs.wait(t, "outsider hub dialling", "not admitted", reason)
			hubLogs.wait(t, "member hub dialled", "not admitted", reason)
			for _, l := range h.Links() {
				if l.Peer == o.Creds.Key.ID() {
					t.Errorf("member hub has a link to the outsider: %+v", l)
				}
			}
			_ = oh

			// Reach a service directly (no hub).
			on, err := certNode(t, "outsider", o.Creds, &logBook{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := on.DialMachine(ctx, target, 7)
			if err == nil {
				_, err = io.ReadFull(c, make([]byte, 1))
				c.Close()
			}
			if !errors.Is(err, pki.ErrDenied) || !strings.Contains(err.Error(), reason) {
				t.Errorf("service: %v; want a refusal saying %q", err, reason)
			}
			nodeLogs.wait(t, "service's record", "refused", reason)
			// diagnosis by one method: the setup succeeds, the verdict refuses
			if _, err := on.Try(ctx, Direct, target, 7); !errors.Is(err, pki.ErrDenied) || !strings.Contains(err.Error(), reason) {
				t.Errorf("Try direct: %v; want a refusal saying %q", err, reason)
			} else if why := Explain(Direct, err, on.Facts(target)); !strings.Contains(why, "refused in the handshake") || !strings.Contains(why, reason) {
				t.Errorf("Explain: %s", why)
			}

			// Reach a service routed, through the lax hub.
			rn, err := Start(context.Background(), Config{Name: "outsider", Creds: o.Creds, ListenAddr: "127.0.0.1", Hubs: []string{lax.Addr().String()}, Methods: []Method{Routed}})
			if err != nil {
				t.Fatalf("outsider attaching to the lax hub: %v", err)
			}
			defer rn.Close()
			c, err = rn.DialMachine(ctx, target, 7)
			if err == nil {
				_, err = io.ReadFull(c, make([]byte, 1))
				c.Close()
			}
			if !errors.Is(err, pki.ErrDenied) || !strings.Contains(err.Error(), reason) {
				t.Errorf("service, routed: %v; want a refusal saying %q", err, reason)
			}
			nodeLogs.wait(t, "service's record of the routed connection", "routed connection from", reason)
			if _, err := rn.Try(ctx, Routed, target, 7); !errors.Is(err, pki.ErrDenied) || !strings.Contains(err.Error(), reason) {
				t.Errorf("Try routed: %v; want a refusal saying %q", err, reason)
			}
		})
	}
}

// Members reach each other by every method; a restricted proxy reaches
// only its services; a listener admits only the users it names.
func TestMembersAndAccess(t *testing.T) {
	g := pkitest.New(t, "testgrid")
	logs := &logBook{}
	h := certHub(t, "hub", g.Member(t, ca.Hub, "hub"), logs)
	srv, err := certNode(t, "srv", g.Member(t, ca.Node, "srv"), logs, h)
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, srv, 7)
	l, err := srv.ListenAllow(9000, pki.Members(nil, []string{"physics"}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	alice, bob := g.User(t, "alice", "physics"), g.User(t, "bob", "chemistry")
	for _, m := range []Method{Direct, Routed} {
		t.Run(string(m), func(t *testing.T) {
			dial := func(creds *pki.Credentials, port uint16) error {
				n, err := Start(context.Background(), Config{Name: "u", Creds: creds, ListenAddr: "127.0.0.1", Hubs: []string{h.Addr().String()}, Methods: []Method{m}})
				if err != nil {
					return err
				}
				defer n.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				c, err := n.DialMachine(ctx, srv.Machine(), port)
				if err != nil {
					return err
				}
				defer c.Close()
				if _, err := c.Write([]byte("x")); err != nil {
					return err
				}
				_, err = io.ReadFull(c, make([]byte, 1))
				return err
			}
			if err := dial(g.Proxy(t, alice, proxy.Options{}), 9000); err != nil {
				t.Errorf("alice (physics) to the physics service: %v", err)
			}
			if err := dial(g.Proxy(t, bob, proxy.Options{}), 9000); !errors.Is(err, pki.ErrDenied) || !strings.Contains(err.Error(), "neither one of") {
				t.Errorf("bob (chemistry) to the physics service: %v", err)
			}
			if err := dial(g.Proxy(t, bob, proxy.Options{}), 7); err != nil {
				t.Errorf("bob to echo: %v", err)
			}
			restricted := g.Proxy(t, alice, proxy.Options{Restrict: []string{"echo"}})
			if err := dial(restricted, 7); err != nil {
				t.Errorf("alice's echo-only proxy to echo: %v", err)
			}
			if err := dial(restricted, 9000); !errors.Is(err, pki.ErrDenied) || !strings.Contains(err.Error(), "restricted to [echo]") {
				t.Errorf("alice's echo-only proxy to port 9000: %v", err)
			}
		})
	}
}
