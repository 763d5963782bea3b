package hubserver

import (
	"testing"

	"github.com/gridlink/gridlink/identity"
)

// A lookup matches a node's name in any case (NAME.grid is a DNS-like
// name) only when no node has exactly that name: a node named "ALICE"
// does not answer for an attached "alice".
func TestLocalMatchesCase(t *testing.T) {
	node := func(name string) (identity.ID, *peer) {
		k, _ := identity.NewKey()
		return k.ID(), &peer{machine: identity.Machine{ID: k.ID(), Name: name}}
	}
	h := &Hub{nodes: map[identity.ID]*peer{}}
	id1, p1 := node("alice")
	h.nodes[id1] = p1
	for _, q := range []string{"alice", "Alice", "ALICE"} {
		if ms := h.localMatches(q); len(ms) != 1 || ms[0].ID != id1 {
			t.Errorf("lookup %q: %v", q, ms)
		}
	}
	id2, p2 := node("ALICE")
	h.nodes[id2] = p2
	if ms := h.localMatches("alice"); len(ms) != 1 || ms[0].ID != id1 {
		t.Errorf("lookup alice with ALICE attached too: %v", ms)
	}
	if ms := h.localMatches("ALICE"); len(ms) != 1 || ms[0].ID != id2 {
		t.Errorf("lookup ALICE: %v", ms)
	}
	if ms := h.localMatches("Alice"); len(ms) != 2 {
		t.Errorf("lookup Alice (no exact match, two in other cases): %v", ms)
	}
}
