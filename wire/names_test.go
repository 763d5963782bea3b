package wire

import (
	"strings"
	"testing"
)

// Refusals and claims decode as sent; malformed ones are refused.
func TestNameMessages(t *testing.T) {
	m := testMachine()
	good := []*Message{
		{Kind: KRefused, Refusal: &Refusal{Code: RefusedNameTaken, Reason: "taken", Holder: &m}},
		{Kind: KRefused, Refusal: &Refusal{Code: RefusedRole, Reason: "a hub certificate attaching as a node"}},
		{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KClaim, Claim: &Claim{Query: 1, Name: "n", Holding: Holding{Node: m, Owner: "CN=n,OU=node,O=g", Bound: true}}}}},
		{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KClaimed, Claimed: &Claimed{Query: 1, Holders: []Holding{{Node: m, Owner: "o", Attached: true, SinceMs: 5}}}}}},
	}
	for _, g := range good {
		if _, err := Decode(Encode(g)); err != nil {
			t.Errorf("%s: %v", g.Kind, err)
		}
	}
	bad := []*Message{
		{Kind: KRefused, Refusal: &Refusal{Code: "maybe", Reason: "x"}},
		{Kind: KRefused, Refusal: &Refusal{Code: RefusedName}},
		{Kind: KRefused, Refusal: &Refusal{Code: RefusedName, Reason: strings.Repeat("x", 1025)}},
		{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KRefused, Refusal: &Refusal{Code: RefusedRole, Reason: "x"}}}},
		{Kind: KClaim, Claim: &Claim{Query: 1, Name: "", Holding: Holding{Node: m, Owner: "o"}}},
		{Kind: KClaim, Claim: &Claim{Query: 1, Name: "n", Holding: Holding{Node: m}}},
		{Kind: KClaimed, Claimed: &Claimed{Holders: make([]Holding, maxHolders+1)}},
	}
	for _, b := range bad {
		if _, err := Decode(Encode(b)); err == nil {
			t.Errorf("%s %+v decoded", b.Kind, b)
		}
	}
}

// A node's hello may give a name longer than other messages carry, so
// that its hub reads it and refuses it by name (RefusedBadName, issue
// 32); up to maxHelloName. A hub's hello and every other message keep
// maxName.
func TestHelloNameBounds(t *testing.T) {
	m := testMachine()
	for _, c := range []struct {
		role string
		n    int
		ok   bool
	}{{"node", 300, true}, {"node", maxHelloName, true}, {"node", maxHelloName + 1, false}, {"hub", maxName, true}, {"hub", maxName + 1, false}} {
		mm := m
		mm.Name = strings.Repeat("x", c.n)
		_, err := Decode(Encode(&Message{Kind: KHello, Hello: &Hello{Role: c.role, Machine: mm}}))
		if (err == nil) != c.ok {
			t.Errorf("a %s's hello with a name of %d bytes: %v", c.role, c.n, err)
		}
	}
	long := m
	long.Name = strings.Repeat("x", 300)
	if _, err := Decode(Encode(&Message{Kind: KMachine, Machine: &long})); err == nil {
		t.Error("a machine message with a name of 300 bytes decoded")
	}
	if _, err := Decode(Encode(&Message{Kind: KRefused, Refusal: &Refusal{Code: RefusedBadName, Reason: "r"}})); err != nil {
		t.Errorf("a bad-name refusal: %v", err)
	}
}
