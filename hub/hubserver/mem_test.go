package hubserver

import "testing"

// An attached node's hub keeps no record of the claim that admitted its
// name once the node is registered: the claim (the holding, a map of the
// hubs asked, a channel) was kept for as long as the node stayed, about
// 1 KiB a node (BenchmarkHubRSS's heap profile, issue 23).
func TestAttachedNodeKeepsNoClaim(t *testing.T) {
	g := newGrid(t)
	a := g.hub("a")
	g.hub("b", "a")
	s := g.node("n1", "a")
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.nodes[s.Machine().ID]
	switch {
	case p == nil:
		t.Fatal("n1 is not attached at a")
	case p.claim != nil:
		t.Errorf("a keeps n1's claim of its name (query %d) after registering it", p.claimQ)
	case len(a.claims) != 0:
		t.Errorf("a holds %d claims with no node being admitted", len(a.claims))
	}
}
