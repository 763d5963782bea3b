package hubserver

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/wire"
)

var mapped = netip.MustParseAddrPort("203.0.113.21:40123")

// lookupHas reports whether a lookup of name from s finds one node whose
// addresses include ap.
func lookupHas(s *hub.Session, name string, ap netip.AddrPort) bool {
	ms, err := s.Lookup(context.Background(), name)
	return err == nil && len(ms) == 1 && slices.Contains(ms[0].Addrs, ap)
}

// A node updates its addresses while attached: its own hub's and the
// other hubs' lookups return the new ones (by name and by the new address),
// with the hub fields and the observed address kept; after its hub dies it
// re-attaches elsewhere with the new addresses.
func TestSetMachine(t *testing.T) {
	g := newGrid(t)
	a := g.hub("a")
	b := g.hub("b", "a")
	testwait.Until(t, "a and b linked", 10*time.Second, func() bool { r, ok := a.route(b); return ok && r.Reachable() })
	n := g.node("n", "a", "b")
	m := g.node("m", "b")
	local := attachNode(t, "local", a.Addr().String())
	if lookupHas(m, "n", mapped) {
		t.Fatal("n lists the mapped address before it set it")
	}

	me := n.Machine()
	me.Addrs = append(me.Addrs, mapped)
	if err := n.SetMachine(me); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "m's lookup (through hub b) to return n's new address", 5*time.Second, func() bool { return lookupHas(m, "n", mapped) })
	if !lookupHas(local, "n", mapped) {
		t.Error("n's own hub's lookup lacks the new address")
	}
	ms, err := m.Lookup(context.Background(), mapped.Addr().String())
	if err != nil || len(ms) != 1 || ms[0].ID != me.ID {
		t.Errorf("lookup by the new address: %v %v", ms, err)
	}
	got := ms[0]
	if got.Hub != a.ID() || got.HubName != "a" || len(got.Observed) == 0 || !got.Observed[0].Addr().IsLoopback() {
		t.Errorf("n as found: %+v; want hub a and the address a observed", got)
	}
	if s := n.Machine(); !slices.Contains(s.Addrs, mapped) || s.Hub != a.ID() {
		t.Errorf("n's own machine: %+v", s)
	}

	// withdrawn again, then re-attached elsewhere with the latest.
	me.Addrs = me.Addrs[:len(me.Addrs)-1]
	if err := n.SetMachine(me); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the address to be withdrawn", 5*time.Second, func() bool { return !lookupHas(m, "n", mapped) })
	me.Addrs = append(me.Addrs, mapped)
	if err := n.SetMachine(me); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the address to be back", 5*time.Second, func() bool { return lookupHas(m, "n", mapped) })
	a.stop()
	testwait.Until(t, "n to re-attach to b", 10*time.Second, func() bool { return n.Hub().ID == b.ID() })
	testwait.Until(t, "b to list n with the new address", 5*time.Second, func() bool {
		ms, err := m.Lookup(context.Background(), "n")
		return err == nil && len(ms) == 1 && ms[0].Hub == b.ID() && slices.Contains(ms[0].Addrs, mapped)
	})
}

// SetMachine refuses what the hub would refuse, before sending anything,
// and the link stays up.
func TestSetMachineRefusals(t *testing.T) {
	g := newGrid(t)
	g.hub("a")
	n := g.node("n", "a")
	other := creds(t).Key.ID()
	many := make([]netip.AddrPort, 33)
	for i := range many {
		many[i] = netip.AddrPortFrom(mapped.Addr(), uint16(1000+i))
	}
	cases := map[string]identity.Machine{
		"is not this node's (":      {ID: other, Name: "n"},
		`name "m" is not this node`: {Name: "m"},
		"more than 32 addresses":    {Name: "n", Addrs: many},
	}
	for want, m := range cases {
		if err := n.SetMachine(m); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("SetMachine(%+v): %v, want %q", m, err, want)
		}
	}
	// a zero ID means the node's own; hub fields are dropped.
	if err := n.SetMachine(identity.Machine{Name: "n", Addrs: []netip.AddrPort{mapped}, HubName: "forged"}); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the update", 5*time.Second, func() bool { return lookupHas(n, "n", mapped) })
	if ms, _ := n.Lookup(context.Background(), "n"); ms[0].HubName != "a" {
		t.Errorf("hub name %q, want a", ms[0].HubName)
	}
	n.Close()
	if err := n.SetMachine(identity.Machine{Name: "n"}); err != hub.ErrClosed {
		t.Errorf("SetMachine after Close: %v", err)
	}
}

// A hub closes the link of a node that sends a machine message for
// another node or under another name, and of a hub that sends one; the
// record stays as it was.
func TestMachineMessageRules(t *testing.T) {
	h, logs := loggedHub(t)
	addr := h.Addr().String()
	good := attachNode(t, "good", addr)
	for i, tc := range []struct {
		name string
		m    func(id identity.ID) identity.Machine
		log  string
	}{
		{"another node's", func(identity.ID) identity.Machine {
			return identity.Machine{ID: good.Machine().ID, Name: "good", Addrs: []netip.AddrPort{mapped}}
		}, "a node may update its own record only"},
		{"renamed", func(id identity.ID) identity.Machine {
			return identity.Machine{ID: id, Name: "good", Addrs: []netip.AddrPort{mapped}}
		}, "keeps the name of its hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("bad%d", i)
			c := dialRaw(t, addr, name)
			var id identity.ID
			for _, n := range h.Nodes() {
				if n.Name == name {
					id = n.ID
				}
			}
			m := tc.m(id)
			b := c.seal(t, wire.Append(nil, wire.TControl, 0, wire.Encode(&wire.Message{Kind: wire.KMachine, Machine: &m})))
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
			closedByHub(t, c)
			testwait.Until(t, "the hub to log why it closed "+name, 5*time.Second, func() bool { return logs.has("node "+name+" (", tc.log) })
			if lookupHas(good, "good", mapped) {
				t.Error("another link changed good's record")
			}
		})
	}
	hp := fuzzPeer(t, h, "hub")
	m := identity.Machine{ID: hp.id, Name: hp.name}
	if err := h.control(hp, &wire.Message{Kind: wire.KMachine, Machine: &m}); err == nil || !strings.Contains(err.Error(), "unexpected machine message from a hub") {
		t.Errorf("machine message from a hub: %v", err)
	}
}
