package wire

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/gridlink/gridlink/identity"
)

// Every machine identifier a control message carries loses its
// host-scoped addresses, in a copy; the message itself is left as it was,
// and one without any is passed on as it is.
func TestStripHostScoped(t *testing.T) {
	loop := netip.MustParseAddrPort("127.0.0.1:1")
	pub := netip.MustParseAddrPort("192.0.2.1:1")
	m := identity.Machine{Name: "n", Addrs: []netip.AddrPort{loop, pub}, Observed: []netip.AddrPort{netip.MustParseAddrPort("[fe80::1]:2"), netip.MustParseAddrPort("0.0.0.0:3")}}
	clean := func(mm identity.Machine) bool {
		return slices.Equal(mm.Addrs, []netip.AddrPort{pub}) && len(mm.Observed) == 0
	}
	for _, c := range []struct {
		name  string
		msg   *Message
		inner func(*Message) []identity.Machine
	}{
		{"found", &Message{Kind: KFound, Found: &Found{Matches: []identity.Machine{m, m}}}, func(c *Message) []identity.Machine { return c.Found.Matches }},
		{"routed found", &Message{Kind: KRouted, Routed: &Routed{Msg: &Message{Kind: KFound, Found: &Found{Matches: []identity.Machine{m}}}}}, func(c *Message) []identity.Machine { return c.Routed.Msg.Found.Matches }},
		{"routed reverse", &Message{Kind: KRouted, Routed: &Routed{Msg: &Message{Kind: KReverse, Reverse: &Reverse{From: m}}}}, func(c *Message) []identity.Machine { return []identity.Machine{c.Routed.Msg.Reverse.From} }},
		{"splice", &Message{Kind: KSplice, Splice: &Splice{From: &m}}, func(c *Message) []identity.Machine { return []identity.Machine{*c.Splice.From} }},
		{"machine", &Message{Kind: KMachine, Machine: &m}, func(c *Message) []identity.Machine { return []identity.Machine{*c.Machine} }},
		{"refusal", &Message{Kind: KRefused, Refusal: &Refusal{Code: RefusedNameTaken, Holder: &m}}, func(c *Message) []identity.Machine { return []identity.Machine{*c.Refusal.Holder} }},
		{"claim", &Message{Kind: KClaim, Claim: &Claim{Holding: Holding{Node: m}}}, func(c *Message) []identity.Machine { return []identity.Machine{c.Claim.Holding.Node} }},
		{"claimed", &Message{Kind: KClaimed, Claimed: &Claimed{Holders: []Holding{{Node: m}}}}, func(c *Message) []identity.Machine { return []identity.Machine{c.Claimed.Holders[0].Node} }},
		{"addr claim", &Message{Kind: KAddrClaim, AddrClaim: &AddrClaim{Holding: Holding{Node: m}}}, func(c *Message) []identity.Machine { return []identity.Machine{c.AddrClaim.Holding.Node} }},
		{"addr claimed", &Message{Kind: KAddrClaimed, AddrClaimed: &AddrClaimed{Holders: []Holding{{Node: m}}}}, func(c *Message) []identity.Machine { return []identity.Machine{c.AddrClaimed.Holders[0].Node} }},
		{"virtual ack", &Message{Kind: KVirtualAck, VirtualAck: &VirtualAck{Taken: []AddrTaken{{Holder: m}}}}, func(c *Message) []identity.Machine { return []identity.Machine{c.VirtualAck.Taken[0].Holder} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := StripHostScoped(c.msg)
			if got == c.msg {
				t.Fatal("passed on as it was")
			}
			for _, mm := range c.inner(got) {
				if !clean(mm) {
					t.Errorf("stripped: addrs %v observed %v, want %v only", mm.Addrs, mm.Observed, pub)
				}
			}
			for _, mm := range c.inner(c.msg) {
				if len(mm.Addrs) != 2 || len(mm.Observed) != 2 {
					t.Errorf("the original changed: addrs %v observed %v", mm.Addrs, mm.Observed)
				}
			}
		})
	}
	plain := &Message{Kind: KFound, Found: &Found{Matches: []identity.Machine{{Name: "p", Addrs: []netip.AddrPort{pub}}}}}
	if StripHostScoped(plain) != plain {
		t.Error("a message without host-scoped addresses was copied")
	}
}
