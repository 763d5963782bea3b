package wire

import (
	"bytes"
	"testing"
)

// RouteAd.Ver goes to hubs of VersionDelta or later only: an older hub's
// strict decoder refuses the unknown field. A version out of bounds is
// refused by the decoder.
func TestRouteAdVer(t *testing.T) {
	m := testMachine()
	g := &Gossip{Routes: []RouteAd{{Hub: m.ID, Name: "g", State: 2, Hops: 1, Ver: VersionDelta}}}
	neu := Encode(&Message{Kind: KGossip, Gossip: StripVer(g, VersionDelta)})
	old := Encode(&Message{Kind: KGossip, Gossip: StripVer(g, VersionDelta-1)})
	if !bytes.Contains(neu, []byte(`"ver":5`)) || bytes.Contains(old, []byte(`"ver"`)) {
		t.Fatalf("to a hub of version %d: %s; to one of %d: %s", VersionDelta, neu, VersionDelta-1, old)
	}
	if g.Routes[0].Ver != VersionDelta {
		t.Fatal("StripVer changed its argument")
	}
	d, err := Decode(neu)
	if err != nil || d.Gossip.Routes[0].Ver != VersionDelta {
		t.Fatalf("decode %s: %+v, %v", neu, d, err)
	}
	for _, v := range []int{-1, maxVer + 1} {
		bad := Encode(&Message{Kind: KGossip, Gossip: &Gossip{Routes: []RouteAd{{Hub: m.ID, State: 2, Ver: v}}}})
		if _, err := Decode(bad); err == nil {
			t.Errorf("version %d decoded", v)
		}
	}
}
