package gridlink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/vconn"
	"github.com/gridlink/gridlink/vip"
)

// vipTestNode starts a node on the hub h, by the given methods (none:
// all).
func vipTestNode(t *testing.T, h *Hub, name string, methods ...vconn.Method) *vconn.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	vc, err := Config{Name: name, Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1"}.node(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vc.Methods, vc.HeadStart = methods, 200*time.Millisecond
	n, err := vconn.Start(ctx, vc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if err := n.WaitAttached(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

// A node whose first candidate addresses another node holds takes the
// next candidate (vip.Addrs' counter 1), and says who holds them.
func TestVIPClaimNextCandidate(t *testing.T) {
	h := serveHub(t, HubConfig{Name: "site"})
	a := vipTestNode(t, h, "a")
	b := vipTestNode(t, h, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := VIPConfig{}.withDefaults()
	first4, first6, _ := vip.Addrs(cfg.Prefix4, cfg.Prefix6, a.ID(), 0)
	if err := b.Session().ClaimAddrs(ctx, first4, first6); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	v4, v6, err := claimAddrs(ctx, a.Session(), cfg, a.ID(), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	next4, next6, _ := vip.Addrs(cfg.Prefix4, cfg.Prefix6, a.ID(), 1)
	if v4 != next4 || v6 != next6 {
		t.Fatalf("claimed %s %s, want the next candidate %s %s", v4, v6, next4, next6)
	}
	if h4, h6, err := a.Session().VirtualAddrs(); h4 != next4 || h6 != next6 || err != nil {
		t.Fatalf("the hub gave a %s %s (%v)", h4, h6, err)
	}
	if !strings.Contains(logs.String(), "holder=b") || !strings.Contains(logs.String(), first4.String()) {
		t.Errorf("log does not name the holder of %s: %s", first4, logs.String())
	}
	// the same node again gets the same addresses (stable across restarts)
	if v4b, _, err := claimAddrs(ctx, a.Session(), cfg, a.ID(), slog.New(slog.NewTextHandler(io.Discard, nil))); v4b != v4 || err != nil {
		t.Fatalf("claimed again: %s, %v", v4b, err)
	}
}

// The resolver answers with the holder of an address through the hubs,
// and vip.ErrNoNode for an address no node holds.
func TestVIPResolver(t *testing.T) {
	h := serveHub(t, HubConfig{Name: "site"})
	a := vipTestNode(t, h, "a")
	b := vipTestNode(t, h, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := VIPConfig{}.withDefaults()
	b4, b6, _ := vip.Addrs(cfg.Prefix4, cfg.Prefix6, b.ID(), 0)
	if err := b.Session().ClaimAddrs(ctx, b4, b6); err != nil {
		t.Fatal(err)
	}
	peers := newVIPPeers()
	r := &vipResolver{s: a.Session(), peers: peers}
	for _, addr := range []netip.Addr{b4, b6} {
		if id, err := r.Resolve(ctx, addr); err != nil || id != b.ID() {
			t.Fatalf("Resolve(%s) = %s, %v; want b", addr, id.Short(), err)
		}
	}
	if p := peers.m[b.ID()]; p == nil || p.name != "b" || len(p.addrs) != 2 {
		t.Fatalf("recorded %+v", p)
	}
	if _, err := r.Resolve(ctx, netip.MustParseAddr("100.96.0.77")); !errors.Is(err, vip.ErrNoNode) {
		t.Fatalf("Resolve of an unheld address: %v, want vip.ErrNoNode", err)
	}
}

// The dialer reaches a peer's vip.Port by the race (DialPeer) or by a
// shortcut only (DialShortcut: direct here); a node that can use no
// shortcut method gets errNoShortcut and still reaches the peer routed.
// The status names each open connection's method as the peer's path.
func TestVIPDialer(t *testing.T) {
	h := serveHub(t, HubConfig{Name: "site"})
	a := vipTestNode(t, h, "a")
	b := vipTestNode(t, h, "b")
	c := vipTestNode(t, h, "c", vconn.Routed)
	l, err := b.Listen(vip.Port)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go echoAll(l)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	peers := newVIPPeers()
	da := &vipDialer{node: a, peers: peers}
	sc, err := da.DialShortcut(ctx, b.ID())
	if err != nil {
		t.Fatal(err)
	}
	if m := sc.(*vipConn).Method(); m != vconn.Direct {
		t.Errorf("shortcut by %s, want direct", m)
	}
	echoOnce(t, sc)
	rc, err := (&vipDialer{node: c, peers: peers}).DialPeer(ctx, b.ID())
	if err != nil {
		t.Fatal(err)
	}
	echoOnce(t, rc)
	if m := rc.(*vipConn).Method(); m != vconn.Routed {
		t.Errorf("c's dial by %s, want routed", m)
	}
	peers.mu.Lock()
	paths := peers.pathsLocked(b.ID())
	name := peers.m[b.ID()].name
	peers.mu.Unlock()
	if strings.Join(paths, ",") != "direct,routed" || name != "b" {
		t.Errorf("paths %v name %q, want direct,routed of b", paths, name)
	}
	if _, err := (&vipDialer{node: c, peers: peers}).DialShortcut(ctx, b.ID()); !errors.Is(err, errNoShortcut) {
		t.Errorf("shortcut from a routed-only node: %v, want errNoShortcut", err)
	}
	sc.Close()
	rc.Close()
	testwait.Until(t, "closed connections to leave the status", 5*time.Second, func() bool {
		peers.mu.Lock()
		defer peers.mu.Unlock()
		return len(peers.pathsLocked(b.ID())) == 0
	})
}

func echoOnce(t *testing.T, c io.ReadWriter) {
	t.Helper()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo %q, %v", buf, err)
	}
}

// claimFake answers every claim with err.
type claimFake struct {
	err    error
	claims int
}

func (f *claimFake) ClaimAddrs(ctx context.Context, v4, v6 netip.Addr) error {
	f.claims++
	return f.err
}

// Every candidate held: the node gives up after vipClaimTries claims with
// a VIPClaimError carrying the refusals; a hub that keeps no virtual
// addresses fails at once; no hub answering keeps the first candidate
// (the session claims it on attachment).
func TestVIPClaimBounded(t *testing.T) {
	ctx := context.Background()
	cfg := VIPConfig{}.withDefaults()
	id := identity.ID{1, 2, 3}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	taken := &claimFake{err: &hub.AddrTakenError{Addr: netip.MustParseAddr("100.96.0.9"), Hub: "site", Reason: "held by x"}}
	_, _, err := claimAddrs(ctx, taken, cfg, id, log)
	var ce *VIPClaimError
	if !errors.As(err, &ce) || ce.Tries != vipClaimTries || len(ce.Errs) != vipClaimTries || taken.claims != vipClaimTries || !errors.Is(err, hub.ErrAddrTaken) {
		t.Fatalf("every candidate held: %v after %d claims, want a VIPClaimError after %d", err, taken.claims, vipClaimTries)
	}
	old := &claimFake{err: fmt.Errorf("hub: claim virtual addresses: hub old speaks version 3: %w", hub.ErrNoVirtual)}
	if _, _, err := claimAddrs(ctx, old, cfg, id, log); !errors.Is(err, hub.ErrNoVirtual) || old.claims != 1 {
		t.Fatalf("an old hub: %v after %d claims", err, old.claims)
	}
	// both addresses outside the hubs' prefixes (and one held): every
	// candidate would be, so the first refusal ends the claim.
	outside := &claimFake{err: errors.Join(&hub.AddrTakenError{Addr: netip.MustParseAddr("100.96.0.9"), Hub: "site", Reason: "held by x"},
		&hub.AddrOutsideError{Addr: netip.MustParseAddr("fd67:726c::9"), Hub: "site", Reason: "outside"})}
	if _, _, err := claimAddrs(ctx, outside, cfg, id, log); !errors.Is(err, hub.ErrAddrOutside) || outside.claims != 1 {
		t.Fatalf("outside the hubs' prefixes: %v after %d claims", err, outside.claims)
	}
	away := &claimFake{err: fmt.Errorf("hub: %w", &hub.NotAttachedError{Cause: errors.New("no route")})}
	v4, v6, err := claimAddrs(ctx, away, cfg, id, log)
	first4, first6, _ := vip.Addrs(cfg.Prefix4, cfg.Prefix6, id, 0)
	if err != nil || v4 != first4 || v6 != first6 || away.claims != 1 {
		t.Fatalf("no hub: %s %s, %v after %d claims; want the first candidate", v4, v6, err, away.claims)
	}
}
