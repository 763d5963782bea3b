package wire

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
)

func virtualSeeds() []*Message {
	m := testMachine()
	v4, v6 := netip.MustParseAddr("100.96.0.5"), netip.MustParseAddr("fd67:726c::5")
	hold := Holding{Node: m, Owner: "o", Attached: true, SinceMs: 5}
	return []*Message{
		{Kind: KVirtual, Virtual: &Virtual{Query: 1, V4: v4, V6: v6}},
		{Kind: KVirtual, Virtual: &Virtual{Query: 2}},
		{Kind: KVirtualAck, VirtualAck: &VirtualAck{Query: 1, V6: v6, Taken: []AddrTaken{{Addr: v4, Holder: m, Reason: "held"}}}},
		{Kind: KLookupAddr, LookupAddr: &LookupAddr{Query: 1, Addr: v6}},
		{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KLookupAddr, LookupAddr: &LookupAddr{Query: 1, Addr: v4}}}},
		{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KAddrClaim, AddrClaim: &AddrClaim{Query: 1, Addr: v4, Holding: hold}}}},
		{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KAddrClaimed, AddrClaimed: &AddrClaimed{Addr: v6, Holders: []Holding{hold}}}}},
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
