package wire

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/gridlink/gridlink/identity"
)

func virtualSeeds() []*Message {
	m := testMachine()
	v4, v6 := netip.MustParseAddr("100.96.0.5"), netip.MustParseAddr("fd67:726c::5")
	hold := Holding{Node: m, Owner: "o", Attached: true, SinceMs: 5}
	return []*Message{
		{Kind: KVirtual, Virtual: &Virtual{Query: 1, V4: v4, V6: v6}},
		{Kind: KVirtual, Virtual: &Virtual{Query: 2}},
		{Kind: KVirtualAck, VirtualAck: &VirtualAck{Query: 1, V6: v6, Taken: []AddrTaken{{Addr: v4, Holder: m, Reason: "held"}}}},
		{Kind: KVirtualAck, VirtualAck: &VirtualAck{Query: 1, Taken: []AddrTaken{{Addr: netip.MustParseAddr("198.51.100.7"), Code: AddrOutside, Reason: "outside"}}}},
		{Kind: KLookupAddr, LookupAddr: &LookupAddr{Query: 1, Addr: v6}},
		{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KLookupAddr, LookupAddr: &LookupAddr{Query: 1, Addr: v4}}}},
		{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KAddrClaim, AddrClaim: &AddrClaim{Query: 1, Addr: v4, Holding: hold}}}},
		{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KAddrClaimed, AddrClaimed: &AddrClaimed{Addr: v6, Holders: []Holding{hold}}}}},
		{Kind: KFound, Found: &Found{Query: 3, Matches: []identity.Machine{virtualMachine(m, v4, v6)}}},
		{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KFound, Found: &Found{Query: 4, Matches: []identity.Machine{m, virtualMachine(m, v6)}}}}},
	}
}

func virtualMachine(m identity.Machine, addrs ...netip.Addr) identity.Machine {
	m.Virtual = addrs
	return m
}

// A lookup's answer carries the node's virtual addresses: at most one of
// each family, each one a node may hold.
func TestFoundVirtual(t *testing.T) {
	m := testMachine()
	v4, v6 := netip.MustParseAddr("100.96.0.5"), netip.MustParseAddr("fd67:726c::5")
	found := func(addrs ...netip.Addr) *Message {
		return &Message{Kind: KFound, Found: &Found{Query: 1, Matches: []identity.Machine{virtualMachine(m, addrs...)}}}
	}
	got, err := Decode(Encode(found(v4, v6)))
	if err != nil || len(got.Found.Matches) != 1 || len(got.Found.Matches[0].Virtual) != 2 ||
		got.Found.Matches[0].Virtual[0] != v4 || got.Found.Matches[0].Virtual[1] != v6 {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	for _, bad := range [][]netip.Addr{
		{v4, v4}, {v6, v6}, {v4, v6, v4},
		{netip.MustParseAddr("127.0.0.1")}, {netip.MustParseAddr("ff02::1")},
		{netip.AddrFrom16(v4.As16())}, {netip.MustParseAddr("fd67::1%eth0")},
	} {
		if _, err := Decode(Encode(found(bad...))); err == nil {
			t.Errorf("virtual %v decoded", bad)
		}
	}
	if _, err := Decode([]byte(`{"kind":"found","found":{"query":1,"matches":[{"id":"` + m.ID.String() + `","virtual":["x"]}]}}`)); err == nil {
		t.Error("a virtual address that is no address decoded")
	}
}

// An older peer's strict decoder refuses the unknown field "virtual":
// StripVirtual leaves it out of what such a peer gets (directly or
// routed), without touching the message sent to newer peers.
func TestStripVirtual(t *testing.T) {
	m := testMachine()
	v4 := netip.MustParseAddr("100.96.0.5")
	f := &Message{Kind: KFound, Found: &Found{Query: 1, Matches: []identity.Machine{virtualMachine(m, v4)}}}
	r := &Message{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, TTL: 3, Msg: f}}
	for _, msg := range []*Message{f, r} {
		if StripVirtual(msg, VersionVirtual) != msg {
			t.Errorf("%s changed for a peer of VersionVirtual", msg.Kind)
		}
		old := StripVirtual(msg, VersionVirtual-1)
		b := Encode(old)
		if bytes.Contains(b, []byte(`"virtual"`)) {
			t.Errorf("%s for an older peer still has virtual addresses: %s", msg.Kind, b)
		}
		if !bytes.Contains(Encode(msg), []byte(`"virtual":["100.96.0.5"]`)) {
			t.Errorf("stripping changed the original %s", msg.Kind)
		}
		if _, err := Decode(b); err != nil {
			t.Errorf("stripped %s: %v", msg.Kind, err)
		}
	}
	plain := &Message{Kind: KFound, Found: &Found{Query: 1, Matches: []identity.Machine{m}}}
	if StripVirtual(plain, 1) != plain {
		t.Error("a message without virtual addresses was copied")
	}
	// what a version 1 decoder (no field "virtual") makes of them
	type oldMachine struct {
		ID    identity.ID      `json:"id"`
		Name  string           `json:"name,omitempty"`
		Addrs []netip.AddrPort `json:"addrs,omitempty"`
	}
	type oldFound struct {
		Kind  string `json:"kind"`
		Found struct {
			Query   uint64       `json:"query"`
			Matches []oldMachine `json:"matches"`
		} `json:"found"`
	}
	var o oldFound
	if err := strictUnmarshal(Encode(f), &o); err == nil {
		t.Error("a version 1 decoder took the field virtual: the test shows nothing")
	}
	if err := strictUnmarshal(Encode(StripVirtual(f, 1)), &o); err != nil || o.Found.Matches[0].Name != m.Name {
		t.Errorf("a version 1 decoder on the stripped answer: %v", err)
	}
}

// The directory's messages decode as sent; malformed ones are refused.
func TestVirtualMessages(t *testing.T) {
	for _, g := range virtualSeeds() {
		if _, err := Decode(Encode(g)); err != nil {
			t.Errorf("%s: %v", g.Kind, err)
		}
	}
	m := testMachine()
	v4, v6 := netip.MustParseAddr("100.96.0.5"), netip.MustParseAddr("fd67:726c::5")
	bad := []*Message{
		{Kind: KVirtual, Virtual: &Virtual{V4: v6}},
		{Kind: KVirtual, Virtual: &Virtual{V6: v4}},
		{Kind: KVirtual, Virtual: &Virtual{V6: netip.AddrFrom16(v4.As16())}},
		{Kind: KVirtual, Virtual: &Virtual{V4: netip.MustParseAddr("0.0.0.0")}},
		{Kind: KVirtual, Virtual: &Virtual{V4: netip.MustParseAddr("127.0.0.1")}},
		{Kind: KVirtual, Virtual: &Virtual{V4: netip.MustParseAddr("169.254.1.1")}},
		{Kind: KVirtual, Virtual: &Virtual{V6: netip.MustParseAddr("ff02::1")}},
		{Kind: KVirtual, Virtual: &Virtual{V6: netip.MustParseAddr("fd67::1%eth0")}},
		{Kind: KVirtual},
		{Kind: KVirtual, Virtual: &Virtual{}, Lookup: &Lookup{Query: 1, Node: "n"}},
		{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KVirtual, Virtual: &Virtual{V4: v4}}}},
		{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KVirtualAck, VirtualAck: &VirtualAck{}}}},
		{Kind: KVirtualAck, VirtualAck: &VirtualAck{Taken: []AddrTaken{{Addr: v4, Holder: m}}}},
		{Kind: KVirtualAck, VirtualAck: &VirtualAck{Taken: []AddrTaken{{Addr: v4, Holder: m, Reason: strings.Repeat("x", 1025)}}}},
		{Kind: KVirtualAck, VirtualAck: &VirtualAck{Taken: []AddrTaken{{Addr: v4, Reason: "no holder ID"}}}},
		{Kind: KVirtualAck, VirtualAck: &VirtualAck{Taken: []AddrTaken{{Addr: v4, Holder: m, Code: AddrOutside, Reason: "outside, with a holder"}}}},
		{Kind: KVirtualAck, VirtualAck: &VirtualAck{Taken: []AddrTaken{{Addr: v4, Code: "other", Reason: "an unknown code"}}}},
		{Kind: KVirtualAck, VirtualAck: &VirtualAck{Taken: make([]AddrTaken, maxTaken+1)}},
		{Kind: KLookupAddr, LookupAddr: &LookupAddr{Query: 1}},
		{Kind: KAddrClaim, AddrClaim: &AddrClaim{Addr: v4, Holding: Holding{Node: m}}},
		{Kind: KAddrClaim, AddrClaim: &AddrClaim{Holding: Holding{Node: m, Owner: "o"}}},
		{Kind: KAddrClaimed, AddrClaimed: &AddrClaimed{Addr: v4, Holders: make([]Holding, maxHolders+1)}},
	}
	for _, b := range bad {
		if _, err := Decode(Encode(b)); err == nil {
			t.Errorf("%s %+v decoded", b.Kind, b)
		}
	}
	// an unknown field in the body is refused (strict decoder)
	if _, err := Decode([]byte(`{"kind":"virtual","virtual":{"query":1,"v4":"100.96.0.5","v5":"x"}}`)); err == nil {
		t.Error("an unknown field decoded")
	}
}

// FuzzVirtualDecode fuzzes Decode from the directory's messages: whatever
// decodes re-encodes and decodes to the same, and holds only addresses a
// node may hold.
func FuzzVirtualDecode(f *testing.F) {
	for _, m := range virtualSeeds() {
		f.Add(Encode(m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		msg, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Decode(Encode(msg))
		if err != nil || !bytes.Equal(Encode(again), Encode(msg)) {
			t.Fatalf("re-decode: %v", err)
		}
		if v := msg.Virtual; v != nil && (CheckVirtual(v.V4, v.V6) != nil || v.V4.IsValid() && !v.V4.Is4()) {
			t.Fatalf("decoded a bad claim %v %v", v.V4, v.V6)
		}
	})
}
