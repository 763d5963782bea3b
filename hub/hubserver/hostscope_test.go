package hubserver

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
)

var (
	nLoop   = netip.MustParseAddrPort("127.0.0.1:7000")
	nLink   = netip.MustParseAddrPort("[fe80::1]:7000")
	nPublic = netip.MustParseAddrPort("192.0.2.50:7000")
)

// hostScoped lists m's host-scoped addresses, its own and observed.
func hostScoped(m identity.Machine) []netip.AddrPort {
	var out []netip.AddrPort
	for _, ap := range append(slices.Clone(m.Addrs), m.Observed...) {
		if identity.HostScoped(ap.Addr()) {
			out = append(out, ap)
		}
	}
	return out
}

// lookupOne is the one match of a lookup of name from s, waited for until
// it lists want among its addresses.
func lookupOne(t *testing.T, s *hub.Session, name string, want netip.AddrPort) identity.Machine {
	t.Helper()
	var got identity.Machine
	testwait.Until(t, s.Machine().Name+"'s lookup of "+name+" to list "+want.String(), 10*time.Second, func() bool {
		ms, err := s.Lookup(context.Background(), name)
		if err != nil || len(ms) != 1 {
			return false
		}
		got = ms[0]
		return slices.Contains(got.Addrs, want)
	})
	return got
}

// setAddrs has s list addrs besides its own.
func setAddrs(t *testing.T, s *hub.Session, addrs ...netip.AddrPort) {
	t.Helper()
	me := s.Machine()
	me.Addrs = append(me.Addrs, addrs...)
	if err := s.SetMachine(me); err != nil {
		t.Fatal(err)
	}
}

// Issue 36: a node on its hub's host (attached over loopback) was handed
// to nodes on other hosts with the loopback address its hub observed
// (and any it listed), which they then dialled on their own loopback. No
// hub hands out a host-scoped address but to a requester on the node's
// host: at the node's own hub, a requester from another host, and one at
// another hub on another host, get its other addresses only; a requester
// on the host gets them all. A node of another host that lists a loopback
// address of its own gets it dropped for everyone, and a circuit's opener
// reaches its target with its addresses scoped the same way.
func TestNoHubHandsOutLoopback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := memGrid(t)
		g.hosts = map[string]netip.Addr{
			"b":   netip.MustParseAddr("192.0.2.2"),
			"far": netip.MustParseAddr("198.51.100.7"),
		}
		a := g.hub("a")
		b := g.hub("b", "a")
		testwait.Until(t, "a and b linked", 10*time.Second, func() bool { r, ok := a.route(b); return ok && r.Reachable() })
		n := g.node("n", "a") // on a's host: over loopback
		near := g.node("near", "a")
		far := g.node("far", "a")
		atB := g.node("atb", "b") // on b's host, which is not a's
		setAddrs(t, n, nLoop, nLink, nPublic)
		farLoop := netip.MustParseAddrPort("127.0.0.1:7001")
		farPublic := netip.MustParseAddrPort("198.51.100.7:7001")
		setAddrs(t, far, farLoop, farPublic)

		got := lookupOne(t, near, "n", nPublic)
		if !slices.Contains(got.Addrs, nLoop) || !slices.Contains(got.Addrs, nLink) || len(got.Observed) != 1 || !got.Observed[0].Addr().IsLoopback() {
			t.Errorf("a requester on n's host got %v observed %v: want its loopback and link-local addresses and the loopback one a observed", got.Addrs, got.Observed)
		}
		for _, s := range []*hub.Session{far, atB} {
			got := lookupOne(t, s, "n", nPublic)
			if hs := hostScoped(got); len(hs) != 0 {
				t.Errorf("%s, on another host, was handed n's host-scoped addresses %v (addrs %v, observed %v)", s.Machine().Name, hs, got.Addrs, got.Observed)
			}
		}
		if got := lookupOne(t, near, "far", farPublic); slices.Contains(got.Addrs, farLoop) {
			t.Errorf("far's own loopback address %v, far being on another host, was handed to near: %v", farLoop, got.Addrs)
		}

		// circuits: the opener's addresses as its target receives them.
		opens := make(chan identity.Machine, 2)
		for _, s := range []*hub.Session{near, atB} {
			go func() {
				for in := range s.Incoming() {
					opens <- in.Open.From
					in.Refuse("test: seen")
				}
			}()
		}
		for _, to := range []*hub.Session{near, atB} {
			c, err := n.Open(context.Background(), to.Machine(), 9)
			if err != nil {
				t.Fatal(err)
			}
			from := <-opens
			c.Close()
			if hs := hostScoped(from); (to == near) != (len(hs) > 0) {
				t.Errorf("n's circuit reached %s with n's addresses %v observed %v: host-scoped ones only for a target on n's host", to.Machine().Name, from.Addrs, from.Observed)
			}
		}
	})
}
