package lab_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// NAT traversal across nat-zoo: every ordered pair of hosts connects on
// every attempt, by the method the two sites call for; where a splice is
// expected (neither side allocates ports at random nor restricts its
// outgoing connections), it splices; every pair's median setup is within
// the uncached bound of the connectivity core (3 RTT + 100 ms). `gridlab
// traversal` makes 20 attempts per pair; this test makes 4 to stay quick.
// (TestNATZooOverlay.)
func natZooTraversal(t *testing.T, topo *topology.Topology, o *matrix.Overlay, hub *topology.Host, hosts []*topology.Host) {
	ctx := context.Background()
	var log strings.Builder
	rep := o.Traversal(ctx, hub, hosts, 4, &log)
	t.Log("\n" + log.String())
	rtt := 0.0
	if topo.Default != nil {
		rtt = float64(2*topo.Default.Delay.Microseconds()) / 1000
	}
	kinds := map[string]bool{}
	for _, p := range rep.Pairs {
		kinds[p.Expect] = true
		if p.Failed > 0 {
			t.Errorf("%s -> %s: %d of %d attempts failed: %v", p.Src, p.Dst, p.Failed, p.Attempts, p.Errors)
		}
		switch {
		case p.Expect == "splice" && p.Methods["splice"] < p.Attempts-1:
			t.Errorf("%s -> %s (%s to %s): spliced %d of %d attempts (%v)", p.Src, p.Dst, p.SrcKind, p.DstKind, p.Methods["splice"], p.Attempts, p.Methods)
		case p.Expect != "splice" && p.Methods[p.Expect] != p.Attempts:
			t.Errorf("%s -> %s (%s to %s): methods %v, want %s", p.Src, p.Dst, p.SrcKind, p.DstKind, p.Methods, p.Expect)
		}
		if bound := 3*rtt + 100; p.MedianMS > bound {
			t.Errorf("%s -> %s: median setup %.1f ms, over the uncached bound %.1f ms", p.Src, p.Dst, p.MedianMS, bound)
		}
	}
	for _, k := range []string{"direct", "reverse", "splice", "routed"} {
		if !kinds[k] {
			t.Errorf("no pair expects %s: the topology no longer covers it", k)
		}
	}
	if rep.Summary.SpliceRate < 0.95 {
		t.Errorf("splicing succeeded in %.1f%% of the attempts where expected, want at least 95%%", 100*rep.Summary.SpliceRate)
	}
}

// TestNATZooOverlay runs the nat-zoo cases that share one overlay (a hub
// on public-server, a node agent on every host: matrix.StartTraversalOverlay),
// each a subtest: the doctor's reasons, then the traversal measurement
// (the doctor's failed splices toward the random NAT leave only pairs
// that are routed anyway backing off).
func TestNATZooOverlay(t *testing.T) {
	bin := gridlinkBin(t)
	topo := labtest.Up(t, "nat-zoo", nil)
	hub := labtest.Host(t, topo, "public-server")
	o, hosts, err := matrix.StartTraversalOverlay(context.Background(), topo, bin, hub)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Stop)
	t.Run("DoctorReasons", func(t *testing.T) { natZooDoctorReasons(t, topo, o) })
	t.Run("Traversal", func(t *testing.T) { natZooTraversal(t, topo, o, hub, hosts) })
}

// Hubs behind NATs and firewalls (dropping and rejecting) that can only
// reach a public hub splice links between themselves: their routes to each
// other become one hop, except to and from the hub behind the random NAT,
// which stays two hops away (through the public hub).
func TestNATZooSplicedHubLinks(t *testing.T) {
	bin := gridlinkBin(t)
	topo := labtest.Up(t, "nat-zoo", nil)
	ctx := context.Background()
	host := func(name string) *topology.Host { return labtest.Host(t, topo, name) }
	behind := []*topology.Host{host("preserve-h"), host("sequential-h"), host("fwdrop-h"), host("fwreject-h"), host("random-h")}
	o, err := matrix.StartHubs(ctx, topo, bin, host("public-server"), behind)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Stop()
	want := func(a, b *topology.Host) int {
		if a.Site.NAT == topology.NATRandom || b.Site.NAT == topology.NATRandom {
			return 2
		}
		return 1
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		var wrong []string
		for _, a := range behind {
			hops, err := o.HubHops(ctx, a)
			if err != nil {
				wrong = append(wrong, err.Error())
				continue
			}
			for _, b := range behind {
				if a != b && hops[b.ID()] != want(a, b) {
					wrong = append(wrong, fmt.Sprintf("%s -> %s: %d hops, want %d", a.ID(), b.ID(), hops[b.ID()], want(a, b)))
				}
			}
		}
		if len(wrong) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, a := range behind {
				t.Logf("hub on %s:\n%s", a.ID(), o.HubLog(a))
			}
			t.Fatalf("hub links not spliced within 90s:\n%s", strings.Join(wrong, "\n"))
		}
		time.Sleep(time.Second)
	}
}
