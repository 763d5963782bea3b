package lab

import (
	"strings"
	"testing"

	"github.com/gridlink/gridlink/internal/lab/topologies"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// A NAT site with inbound=reject resets a new inbound TCP connection (a
// SYN to the WAN address that matches no mapping) in the gateway's input
// and forward chains, and still masquerades.
func TestRulesetRejectingNAT(t *testing.T) {
	src, _ := topologies.Source("nat-reject")
	topo, err := topology.Parse("nat-reject.topo", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	rs := strings.Join(Ruleset(topo.Site("east")), "\n")
	reset := `iifname "wan0" meta l4proto tcp reject with tcp reset`
	if n := strings.Count(rs, reset); n != 2 {
		t.Errorf("%d rules %q, want 2 (input and forward):\n%s", n, reset, rs)
	}
	if !strings.Contains(rs, "masquerade") || strings.Contains(rs, "fully-random") {
		t.Errorf("want a port-preserving masquerade:\n%s", rs)
	}
	if strings.Contains(rs, `iifname "wan0" drop`) {
		t.Errorf("a rejecting NAT drops:\n%s", rs)
	}
}
