package hubserver

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/wire"
)

// vipNode attaches a node of a fresh identity to h.
func vipNode(t *testing.T, name string, h *Hub) *hub.Session {
	t.Helper()
	s, err := attachAs(t, name, creds(t), h)
	if err != nil {
		t.Fatalf("attach %s: %v", name, err)
	}
	return s
}

var (
	v4a = netip.MustParseAddr("100.96.0.5")
	v6a = netip.MustParseAddr("fd67:726c::5")
	v4b = netip.MustParseAddr("100.96.0.6")
	v6b = netip.MustParseAddr("fd67:726c::6")
)

// addrRefused checks that err refuses address a to this node, naming holder
// and its hub on the refused end, and that the refusing hub logged the
// same reason with the refused node's name.
func addrRefused(t *testing.T, err error, a netip.Addr, holder *hub.Session, holderHub, refused string, hubLog *logBook) {
	t.Helper()
	var te *hub.AddrTakenError
	if !errors.As(err, &te) || !errors.Is(err, hub.ErrAddrTaken) || !errors.Is(err, direct.ErrRefused) {
		t.Fatalf("got %v, want the address %s refused (hub.ErrAddrTaken)", err, a)
	}
	if te.Addr != a || te.Holder.ID != holder.Machine().ID || te.Holder.HubName != holderHub {
		t.Errorf("the refusal names %s held by %s at %q, want %s held by %s at %q", te.Addr, te.Holder.ID.Short(), te.Holder.HubName, a, holder.Machine().ID.Short(), holderHub)
	}
	for _, want := range []string{a.String(), holder.Machine().ID.Short(), "at hub " + holderHub} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refused node's error %q does not say %q", err, want)
		}
	}
	hubLog.wait(t, "the refusing hub's log", "node "+refused+" (", "refused", te.Reason)
}

// Three hubs: a node's virtual addresses, claimed at one, are found from
// a node at another, IPv4 and IPv6; an address nobody holds is a typed
// not-found.
func TestVirtualLookupAcrossHubs(t *testing.T) {
	a, _ := namedHub(t, "a", creds(t))
	b, _ := namedHub(t, "b", creds(t), a)
	c, _ := namedHub(t, "c", creds(t), b)
	linked(t, a, b, c)
	n1 := vipNode(t, "n1", a)
	n3 := vipNode(t, "n3", c)
	ctx := context.Background()
	if err := n1.ClaimAddrs(ctx, v4a, v6a); err != nil {
		t.Fatalf("claim: %v", err)
	}
	if v4, v6, err := n1.VirtualAddrs(); v4 != v4a || v6 != v6a || err != nil {
		t.Errorf("n1 holds %v %v (%v), want %v %v", v4, v6, err, v4a, v6a)
	}
	for _, addr := range []netip.Addr{v4a, v6a, netip.AddrFrom16(v4a.As16())} {
		m, err := n3.LookupAddr(ctx, addr)
		if err != nil || m.ID != n1.Machine().ID || m.HubName != "a" {
			t.Errorf("lookup %s from hub c: %v %v, want n1 at a", addr, m, err)
		}
	}
	_, err := n3.LookupAddr(ctx, v4b)
	var nf *hub.AddrNotFoundError
	if !errors.As(err, &nf) || !errors.Is(err, hub.ErrNotFound) || nf.Addr != v4b {
		t.Errorf("lookup of an address nobody holds: %v", err)
	}
}

// A node claiming an address another node holds (to capture its traffic)
// is refused, at the holder's hub and at another, told which address and
// who holds it, as the refusing hub logs it; it holds the rest of its
// claim, and lookups still find the first holder. A node cannot claim for
// itself with hubs' messages either.
func TestVirtualAddrCaptureRefused(t *testing.T) {
	a, alog := namedHub(t, "a", creds(t))
	b, blog := namedHub(t, "b", creds(t), a)
	linked(t, a, b)
	ctx := context.Background()
	victim := vipNode(t, "victim", a)
	if err := victim.ClaimAddrs(ctx, v4a, v6a); err != nil {
		t.Fatal(err)
	}
	t.Run("SameHub", func(t *testing.T) {
		evil := vipNode(t, "evil1", a)
		err := evil.ClaimAddrs(ctx, v4a, v6b)
		addrRefused(t, err, v4a, victim, "a", "evil1", alog)
		if v4, v6, _ := evil.VirtualAddrs(); v4.IsValid() || v6 != v6b {
			t.Errorf("the refused node holds %v %v, want only %v", v4, v6, v6b)
		}
	})
	t.Run("OtherHub", func(t *testing.T) {
		evil := vipNode(t, "evil2", b)
		err := evil.ClaimAddrs(ctx, netip.Addr{}, v6a)
		addrRefused(t, err, v6a, victim, "a", "evil2", blog)
	})
	t.Run("ForgedClaim", func(t *testing.T) {
		evil := vipNode(t, "evil3", b)
		forged := victim.Machine()
		forged.ID, forged.Hub, forged.HubName = evil.Machine().ID, b.ID(), "b"
		claim := &wire.Message{Kind: wire.KAddrClaim, AddrClaim: &wire.AddrClaim{Addr: v4a,
			Holding: wire.Holding{Node: forged, Owner: forged.ID.String(), Attached: true, SinceMs: 1}}}
		if err := evil.Send(ctx, a.ID(), identity.ID{}, claim); err != nil {
			t.Fatal(err)
		}
		alog.wait(t, "the hub's log", "dropping a addr-claim message from node "+evil.Machine().ID.Short())
	})
	for _, from := range []*Hub{a, b} {
		n := vipNode(t, "", from)
		for _, addr := range []netip.Addr{v4a, v6a} {
			if m, err := n.LookupAddr(ctx, addr); err != nil || m.ID != victim.Machine().ID {
				t.Errorf("lookup %s at %s: %v %v, want the victim", addr, from.Name(), m, err)
			}
		}
	}
	if v4, v6, err := victim.VirtualAddrs(); v4 != v4a || v6 != v6a || err != nil {
		t.Errorf("the victim holds %v %v (%v)", v4, v6, err)
	}
}

// Three nodes claiming one address at once, two at one hub and one at
// another: one holds it at both hubs, the others are refused.
func TestVirtualConcurrentClaims(t *testing.T) {
	a, _ := namedHub(t, "a", creds(t))
	b, _ := namedHub(t, "b", creds(t), a)
	linked(t, a, b)
	ctx := context.Background()
	for round := range 5 {
		addr := netip.AddrFrom4([4]byte{100, 96, 1, byte(round + 1)})
		nodes := []*hub.Session{vipNode(t, fmt.Sprintf("x%d", round), a), vipNode(t, fmt.Sprintf("y%d", round), b), vipNode(t, fmt.Sprintf("z%d", round), a)}
		errs := make([]error, len(nodes))
		var wg sync.WaitGroup
		for i, n := range nodes {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = n.ClaimAddrs(ctx, addr, netip.Addr{}) }()
		}
		wg.Wait()
		var winner *hub.Session
		for i, err := range errs {
			switch {
			case err == nil:
				if winner != nil {
					t.Fatalf("%s: two nodes hold it", addr)
				}
				winner = nodes[i]
			case !errors.Is(err, hub.ErrAddrTaken):
				t.Fatalf("%s: %v", addr, err)
			}
		}
		if winner == nil {
			t.Fatalf("%s: neither holds it: %v", addr, errs)
		}
		for _, n := range nodes {
			if m, err := n.LookupAddr(ctx, addr); err != nil || m.ID != winner.Machine().ID {
				t.Errorf("%s from %s: %v %v, want the winner", addr, n.Machine().HubName, m, err)
			}
		}
	}
}

// A node that leaves frees its addresses: another node may claim them.
func TestVirtualLeaveFrees(t *testing.T) {
	a, _ := namedHub(t, "a", creds(t))
	b, _ := namedHub(t, "b", creds(t), a)
	linked(t, a, b)
	ctx := context.Background()
	first := vipNode(t, "first", a)
	if err := first.ClaimAddrs(ctx, v4a, v6a); err != nil {
		t.Fatal(err)
	}
	next := vipNode(t, "next", b)
	if err := next.ClaimAddrs(ctx, v4a, v6a); !errors.Is(err, hub.ErrAddrTaken) {
		t.Fatalf("while the first holds them: %v", err)
	}
	first.Close()
	testwait.Until(t, "hub a to free the addresses", 10*time.Second, func() bool {
		_, err := next.LookupAddr(ctx, v4a)
		return errors.Is(err, hub.ErrNotFound)
	})
	if err := next.ClaimAddrs(ctx, v4a, v6a); err != nil {
		t.Fatalf("after the first left: %v", err)
	}
	n := vipNode(t, "", a)
	if m, err := n.LookupAddr(ctx, v6a); err != nil || m.ID != next.Machine().ID {
		t.Errorf("lookup at a: %v %v, want next", m, err)
	}
}

// Two hubs that gave one address to two nodes while they could not reach
// each other settle it once they can: the earlier holder keeps it, the
// later one is told it lost it (and keeps its link).
func TestVirtualSettledWhenHubsMeet(t *testing.T) {
	a, _ := namedHub(t, "a", creds(t))
	b, blog := namedHub(t, "b", creds(t))
	ctx := context.Background()
	first := vipNode(t, "first", a)
	if err := first.ClaimAddrs(ctx, v4a, netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // claimed a few milliseconds apart, by the hubs' clocks (real ones: the hubs run on real sockets)
	second := vipNode(t, "second", b)
	if err := second.ClaimAddrs(ctx, v4a, v6b); err != nil {
		t.Fatalf("b, which does not know a yet: %v", err)
	}
	c, _ := namedHub(t, "c", creds(t), a, b)
	linked(t, a, b, c)
	testwait.Until(t, "the later holder to be told", 10*time.Second, func() bool {
		_, _, err := second.VirtualAddrs()
		return err != nil
	})
	v4, v6, err := second.VirtualAddrs()
	var te *hub.AddrTakenError
	if !errors.As(err, &te) || !te.Lost || te.Addr != v4a || te.Holder.ID != first.Machine().ID || v4.IsValid() || v6 != v6b {
		t.Fatalf("the later holder: %v %v %v", v4, v6, err)
	}
	blog.wait(t, "hub b's log", "node second (", "loses its virtual address", te.Reason)
	if _, _, err := first.VirtualAddrs(); err != nil {
		t.Errorf("the earlier holder lost it too: %v", err)
	}
	if m, err := second.LookupAddr(ctx, v4a); err != nil || m.ID != first.Machine().ID {
		t.Errorf("lookup at b: %v %v, want first", m, err)
	}
}

// A node claiming an address outside the grid's virtual prefixes (an
// underlay address, which NAME.grid and lookups by address would then
// give out: issue 32) is refused, told which address and why, as the
// refusing hub logs it; it holds none of it, and no lookup finds it. A
// hub configured with the grid's own prefixes admits claims in them
// only.
func TestVirtualAddrOutsidePrefixesRefused(t *testing.T) {
	a, alog := namedHub(t, "a", creds(t))
	ctx := context.Background()
	underlay4, underlay6 := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8::7")
	evil := vipNode(t, "squat", a)
	err := evil.ClaimAddrs(ctx, underlay4, underlay6)
	for _, addr := range []netip.Addr{underlay4, underlay6} {
		outsideRefused(t, err, addr, "squat", alog)
	}
	if v4, v6, _ := evil.VirtualAddrs(); v4.IsValid() || v6.IsValid() {
		t.Errorf("the refused node holds %v %v", v4, v6)
	}
	n := vipNode(t, "asker", a)
	if m, err := n.LookupAddr(ctx, underlay4); !errors.Is(err, hub.ErrNotFound) {
		t.Errorf("lookup of the refused address: %v %v, want not found", m, err)
	}
	// in the prefixes and out of them in one claim: the one held, the
	// other refused.
	if err := evil.ClaimAddrs(ctx, v4a, underlay6); !errors.Is(err, hub.ErrAddrOutside) || errors.Is(err, hub.ErrAddrTaken) {
		t.Errorf("a claim half outside: %v", err)
	}
	if v4, v6, _ := evil.VirtualAddrs(); v4 != v4a || v6.IsValid() {
		t.Errorf("after a claim half outside the node holds %v %v, want only %v", v4, v6, v4a)
	}

	logs := newLogBook(t, "own: ")
	own := startHub(t, Config{Name: "own", Creds: creds(t), Logf: logs.logf,
		VirtualPrefixes: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16"), netip.MustParsePrefix("fd00:1::/48")}})
	m := vipNode(t, "member", own)
	if err := m.ClaimAddrs(ctx, netip.MustParseAddr("10.99.0.5"), netip.MustParseAddr("fd00:1::5")); err != nil {
		t.Errorf("a claim in the grid's own prefixes: %v", err)
	}
	outsideRefused(t, vipNode(t, "default", own).ClaimAddrs(ctx, v4b, netip.Addr{}), v4b, "default", logs)
	if _, err := New(Config{Name: "bad", Creds: creds(t), Listen: "127.0.0.1:0", VirtualPrefixes: []netip.Prefix{netip.MustParsePrefix("10.99.0.1/16")}}); err == nil {
		t.Error("a hub with a prefix with host bits started")
	}
}

// outsideRefused checks that err refuses address a to node refused as
// outside the grid's prefixes, in the words the refusing hub logged.
func outsideRefused(t *testing.T, err error, a netip.Addr, refused string, hubLog *logBook) {
	t.Helper()
	var oe *hub.AddrOutsideError
	if j, ok := err.(interface{ Unwrap() []error }); ok { // errors.Join: one per address
		for _, e := range j.Unwrap() {
			if errors.As(e, &oe) && oe.Addr == a {
				break
			}
			oe = nil
		}
	}
	if oe == nil || !errors.Is(err, hub.ErrAddrOutside) || !errors.Is(err, direct.ErrRefused) {
		t.Fatalf("got %v, want the address %s refused as outside the prefixes (hub.ErrAddrOutside)", err, a)
	}
	for _, want := range []string{a.String(), "outside the grid's virtual prefixes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refused node's error %q does not say %q", err, want)
		}
	}
	hubLog.wait(t, "the refusing hub's log", "node "+refused+" (", "refused", oe.Reason)
}
