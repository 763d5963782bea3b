package hubserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
	"github.com/gridlink/gridlink/status"
	"github.com/gridlink/gridlink/wire"
)

// logBook keeps what a hub or session logs, for tests that check that
// both ends of a refusal name the same reason.
type logBook struct {
	mu    sync.Mutex
	lines []string
	also  func(string, ...any)
}

func newLogBook(t testing.TB, prefix string) *logBook {
	return &logBook{also: testLogf(t, prefix)}
}

func (b *logBook) logf(format string, args ...any) {
	b.mu.Lock()
	b.lines = append(b.lines, fmt.Sprintf(format, args...))
	b.mu.Unlock()
	b.also(format, args...)
}

// wait waits until a line holding every one of parts is logged.
func (b *logBook) wait(t testing.TB, what string, parts ...string) {
	t.Helper()
	defer func() {
		if t.Failed() {
			b.mu.Lock()
			defer b.mu.Unlock()
			t.Logf("%s: no line with %q in:\n%s", what, parts, strings.Join(b.lines, "\n"))
		}
	}()
	testwait.Until(t, fmt.Sprintf("%s (a line with %q)", what, parts), 10*time.Second, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, l := range b.lines {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(l, p)
			}
			if ok {
				return true
			}
		}
		return false
	})
}

// namedHub starts a hub with creds that dials peers; its log is kept.
func namedHub(t *testing.T, name string, creds *pki.Credentials, peers ...*Hub) (*Hub, *logBook) {
	t.Helper()
	logs := newLogBook(t, name+": ")
	var specs []string
	for _, p := range peers {
		specs = append(specs, p.Addr().String())
	}
	h, err := New(Config{Name: name, Creds: creds, Listen: "127.0.0.1:0", Peers: specs, Interval: testInterval, Logf: logs.logf, NoSplice: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return h, logs
}

// linked waits until every hub has a route to every other.
func linked(t *testing.T, hubs ...*Hub) {
	t.Helper()
	testwait.Until(t, "the hubs to route to each other", 10*time.Second, func() bool {
		for _, h := range hubs {
			n := 0
			for _, r := range h.Routes() {
				if r.Reachable() {
					n++
				}
			}
			if n < len(hubs)-1 {
				return false
			}
		}
		return true
	})
}

// attachAs attaches a node called name with creds to hubs; the error is
// Attach's.
func attachAs(t *testing.T, name string, creds *pki.Credentials, hubs ...*Hub) (*hub.Session, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var specs []string
	for _, h := range hubs {
		specs = append(specs, h.Addr().String())
	}
	s, err := hub.Attach(ctx, hub.SessionConfig{Creds: creds, Machine: identity.Machine{Name: name}, Hubs: specs, Logf: testLogf(t, name+": ")})
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

// refusedFor checks that err is a permanent name refusal that names the
// holder (its ID and hub), that it came before Attach's deadline, and that
// the refusing hub logged the same reason.
func refusedFor(t *testing.T, err error, kind error, holder identity.ID, holderHub string, hubLog *logBook) {
	t.Helper()
	var re *hub.RefusedError
	if !errors.As(err, &re) || !errors.Is(err, kind) || !errors.Is(err, hub.ErrPermanent) || !errors.Is(err, pki.ErrDenied) {
		t.Fatalf("got %v, want a permanent refusal (%v)", err, kind)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the refused node retried until its deadline: %v", err)
	}
	if !holder.IsZero() {
		if re.Holder.ID != holder || re.Holder.HubName != holderHub {
			t.Errorf("the refusal names holder %s at %q, want %s at %q", re.Holder.ID.Short(), re.Holder.HubName, holder.Short(), holderHub)
		}
		for _, want := range []string{holder.Short(), "at hub " + holderHub} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refused node's error %q does not say %q", err, want)
			}
		}
	}
	hubLog.wait(t, "the refusing hub's log", re.Reason)
}

// An admitted member of a CA grid (alice, whose proxy may go by any free
// name) attaches as srvhome while srvhome is attached: refused at
// srvhome's hub and at another hub of the overlay, the holder named on
// both ends. A node whose certificate certifies another name cannot go
// by srvhome at all.
func TestNameImpostorRefused(t *testing.T) {
	g := pkitest.New(t, "grid")
	a, alog := namedHub(t, "a", g.Member(t, ca.Hub, "a"))
	b, blog := namedHub(t, "b", g.Member(t, ca.Hub, "b"), a)
	linked(t, a, b)
	srv, err := attachAs(t, "srvhome", g.Member(t, ca.Node, "srvhome"), a)
	if err != nil {
		t.Fatal(err)
	}
	alice := g.User(t, "alice")

	t.Run("SameHub", func(t *testing.T) {
		_, err := attachAs(t, "srvhome", g.Proxy(t, alice, proxy.Options{}), a)
		refusedFor(t, err, hub.ErrNameTaken, srv.Machine().ID, "a", alog)
		wantRefused(t, a, "connection", status.RefusedNameTaken)
	})
	t.Run("OtherHub", func(t *testing.T) {
		_, err := attachAs(t, "srvhome", g.Proxy(t, alice, proxy.Options{}), b)
		refusedFor(t, err, hub.ErrNameTaken, srv.Machine().ID, "a", blog)
	})
	t.Run("CertifiedElse", func(t *testing.T) {
		_, err := attachAs(t, "srvhome", g.Member(t, ca.Node, "evil"), b)
		refusedFor(t, err, pki.ErrNameNotCertified, identity.ID{}, "", blog)
		wantRefused(t, b, "connection", status.RefusedName)
		if !strings.Contains(err.Error(), `certifies "evil" only`) {
			t.Errorf("the refusal %q does not say what the certificate certifies", err)
		}
	})
	// lookups still find the one srvhome, from either hub
	for _, at := range []*Hub{a, b} {
		n, err := attachAs(t, "", g.Proxy(t, alice, proxy.Options{}), at)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := n.Lookup(context.Background(), "srvhome")
		if err != nil || len(ms) != 1 || ms[0].ID != srv.Machine().ID {
			t.Errorf("lookup srvhome at %s: %v %v", at.Name(), ms, err)
		}
	}
	// the same identity may hold its name twice (a reissued certificate)
	if _, err := attachAs(t, "srvhome", g.Member(t, ca.Node, "srvhome"), b); err != nil {
		t.Errorf("srvhome's second node: %v", err)
	}
}

// A certificate binds its name: a user's node that took srvhome while
// srvhome was away loses it when srvhome attaches, and is told.
func TestNameCertifiedTakesOver(t *testing.T) {
	g := pkitest.New(t, "grid")
	a, _ := namedHub(t, "a", g.Member(t, ca.Hub, "a"))
	b, blog := namedHub(t, "b", g.Member(t, ca.Hub, "b"), a)
	linked(t, a, b)
	squat, err := attachAs(t, "srvhome", g.Proxy(t, g.User(t, "alice"), proxy.Options{}), b)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := attachAs(t, "srvhome", g.Member(t, ca.Node, "srvhome"), a)
	if err != nil {
		t.Fatalf("srvhome, whose certificate certifies the name: %v", err)
	}
	testwait.Until(t, "the squatter to be told", 10*time.Second, func() bool { return squat.Refused() != nil })
	refusedFor(t, squat.Refused(), hub.ErrNameTaken, srv.Machine().ID, "a", blog)
	if _, err := squat.Lookup(context.Background(), "srvhome"); !errors.Is(err, hub.ErrNameTaken) {
		t.Errorf("the squatter's session after the refusal: %v", err)
	}
}

// In an open grid the first holder keeps a name: a second node under it
// is refused, at the same hub and at another.
func TestNameOpenGridFirstKeeps(t *testing.T) {
	a, alog := namedHub(t, "a", creds(t))
	b, blog := namedHub(t, "b", creds(t), a)
	linked(t, a, b)
	first, err := attachAs(t, "n1", creds(t), a)
	if err != nil {
		t.Fatal(err)
	}
	_, err = attachAs(t, "n1", creds(t), a)
	refusedFor(t, err, hub.ErrNameTaken, first.Machine().ID, "a", alog)
	_, err = attachAs(t, "n1", creds(t), b)
	refusedFor(t, err, hub.ErrNameTaken, first.Machine().ID, "a", blog)
	_, err = attachAs(t, "N1", creds(t), b) // names are one in any case, as lookups match them
	refusedFor(t, err, hub.ErrNameTaken, first.Machine().ID, "a", blog)
	// the holder itself re-attaches (its key is its identity)
	first.Close()
}

// Two nodes claiming one name at two hubs at once: one keeps it at both
// hubs, the other is refused.
func TestNameConcurrentClaims(t *testing.T) {
	a, _ := namedHub(t, "a", creds(t))
	b, _ := namedHub(t, "b", creds(t), a)
	linked(t, a, b)
	for round := range 5 {
		name := fmt.Sprintf("twin-%d", round)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, h := range []*Hub{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = attachAs(t, name, creds(t), h)
			}()
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, hub.ErrNameTaken):
				t.Fatalf("%s: %v", name, err)
			}
		}
		held := 0
		for _, h := range []*Hub{a, b} {
			for _, m := range h.Nodes() {
				if m.Name == name {
					held++
				}
			}
		}
		if ok != 1 || held != 1 {
			t.Errorf("%s: %d admitted, %d held (%v), want one", name, ok, held, errs)
		}
	}
}

// A hub certificate attaching as a node and a node certificate linking as
// a hub are refused naming the role, on both ends, and neither retries.
func TestRoleMismatchRefused(t *testing.T) {
	g := pkitest.New(t, "grid")
	a, alog := namedHub(t, "a", g.Member(t, ca.Hub, "a"))
	t.Run("HubAsNode", func(t *testing.T) {
		start := time.Now()
		_, err := attachAs(t, "b", g.Member(t, ca.Hub, "b"), a)
		refusedFor(t, err, hub.ErrWrongRole, identity.ID{}, "", alog)
		if !strings.Contains(err.Error(), "has a hub certificate but asked to attach as a node") {
			t.Errorf("the refusal %q does not name the role problem", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("the refused node retried for %v", d)
		}
	})
	t.Run("NodeAsHub", func(t *testing.T) {
		_, blog := namedHub(t, "n", g.Member(t, ca.Node, "n"), a)
		reason := "has a node certificate but asked to link as a hub"
		alog.wait(t, "the refusing hub's log", "refused", reason)
		blog.wait(t, "the refused hub's log", "not admitted by hub", reason, "not dialling it again")
	})
	t.Run("HubNameNotCertified", func(t *testing.T) {
		_, xlog := namedHub(t, "x", g.Member(t, ca.Hub, "c"), a)
		reason := `c (hub, `
		alog.wait(t, "the refusing hub's log", "refused", reason, `asked for the name "x", but its certificate certifies "c" only`)
		xlog.wait(t, "the refused hub's log", "not admitted by hub", `asked for the name "x", but its certificate certifies "c" only`, "not dialling it again")
	})
}

// A node cannot claim names for itself with hubs' messages: a forged
// claim routed to a hub is dropped, the holder keeps its name.
func TestNameForgedClaimDropped(t *testing.T) {
	g := pkitest.New(t, "grid")
	a, alog := namedHub(t, "a", g.Member(t, ca.Hub, "a"))
	srv, err := attachAs(t, "srvhome", g.Member(t, ca.Node, "srvhome"), a)
	if err != nil {
		t.Fatal(err)
	}
	evil, err := attachAs(t, "evil", g.Member(t, ca.Node, "evil"), a)
	if err != nil {
		t.Fatal(err)
	}
	forged := srv.Machine()
	forged.ID = evil.Machine().ID
	claim := &wire.Message{Kind: wire.KClaim, Claim: &wire.Claim{Query: 1, Name: "srvhome",
		Holding: wire.Holding{Node: forged, Owner: "CN=evil,OU=node,O=grid", Bound: true, Attached: true}}}
	if err := evil.Send(context.Background(), a.ID(), identity.ID{}, claim); err != nil {
		t.Fatal(err)
	}
	alog.wait(t, "the hub's log", "dropping a claim message from node "+evil.Machine().ID.Short())
	if srv.Refused() != nil || len(a.Nodes()) != 2 {
		t.Errorf("the forged claim evicted srvhome: %v %v", srv.Refused(), a.Nodes())
	}
	alog.mu.Lock()
	defer alog.mu.Unlock()
	for _, l := range alog.lines {
		if strings.Contains(l, "loses its name") {
			t.Errorf("hub: %s", l)
		}
	}
}

// Two hubs that admitted nodes of two identities under one name while
// they could not reach each other settle it once they can: the earlier
// holder keeps the name, the later one is refused and told who holds it.
func TestNameSettledWhenHubsMeet(t *testing.T) {
	a, _ := namedHub(t, "a", creds(t))
	b, blog := namedHub(t, "b", creds(t))
	first, err := attachAs(t, "n1", creds(t), a)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // admitted a few milliseconds apart, by the hubs' clocks (real ones: the hubs run on real sockets)
	second, err := attachAs(t, "n1", creds(t), b)
	if err != nil {
		t.Fatalf("b, which does not know a yet: %v", err)
	}
	c, _ := namedHub(t, "c", creds(t), a, b)
	linked(t, a, b, c)
	testwait.Until(t, "the later holder to be told", 10*time.Second, func() bool { return second.Refused() != nil })
	refusedFor(t, second.Refused(), hub.ErrNameTaken, first.Machine().ID, "a", blog)
	if first.Refused() != nil {
		t.Errorf("the earlier holder was refused too: %v", first.Refused())
	}
}
