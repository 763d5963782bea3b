package lab_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/status"
)

// reason is what a method's diagnosis must say: the end its cause lies at,
// words the explanation must have, and words it must not have (a cause
// that is not the true one, or the wrong end).
type reason struct {
	method string
	ok     bool
	end    string
	has    []string
	hasNot []string
}

// checkDoctor runs `gridlink doctor --json` on src toward dst, once the
// overlay has found dst (the hubs need a few gossip rounds) and, with
// natKnown, once dst has published the NAT it classified itself behind
// (a few seconds after it starts), and checks each reason.
func checkDoctor(t *testing.T, ctx context.Context, o *matrix.Overlay, src, dst *topology.Host, natKnown bool, want []reason) {
	t.Helper()
	var d status.Diagnosis
	deadline := time.Now().Add(45 * time.Second)
	for {
		out, err := o.Run(ctx, src, "doctor", "--json", dst.ID())
		d = status.Diagnosis{}
		jerr := json.Unmarshal(out, &d)
		if jerr == nil && d.Target != nil && len(d.Methods) == 4 && (!natKnown || d.Target.NAT.IsValid()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("doctor %s -> %s: %v %v\n%s", src.ID(), dst.ID(), err, jerr, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	by := map[string]status.MethodCheck{}
	for _, m := range d.Methods {
		by[m.Method] = m
		t.Logf("%s -> %s: %-7s ok=%v end=%q cause=%q: %s", src.ID(), dst.ID(), m.Method, m.OK, m.End, m.Cause, m.Why)
	}
	for _, w := range want {
		m := by[w.method]
		bad := m.OK != w.ok || (!w.ok && m.End != w.end)
		for _, s := range w.has {
			bad = bad || !strings.Contains(m.Why, s)
		}
		for _, s := range w.hasNot {
			bad = bad || strings.Contains(m.Why, s)
		}
		if bad {
			t.Errorf("doctor %s -> %s, %s: ok=%v end=%q why %q (error %q); want ok=%v end=%q, saying %q and not %q",
				src.ID(), dst.ID(), w.method, m.OK, m.End, m.Why, m.Error, w.ok, w.end, w.has, w.hasNot)
		}
	}
}

// `gridlink doctor` names the true cause of each failure, at the right end
// (issue 17): on grid6 toward a public target from a non-routed node (the
// non-routed end is this host, not the public target), toward the NATed
// desktop (behind a NAT, not non-routed), toward a non-routed node (the
// target has no route back), and from and to the ssh-only site hiroshi
// (TestGrid6Overlay). The four cases run side by side: each doctor waits
// out its tries' 5 s where a try hangs (a SYN dropped), none depends on
// another's.
func (g *grid6Overlay) doctorReasons(t *testing.T) {
	topo, o := g.topo, g.o
	ctx := context.Background()
	h := func(name string) *topology.Host { return labtest.Host(t, topo, name) }
	das3v, g5k, hiroshi, desktop := h("das3v-n1"), h("g5k-n1"), h("hiroshi-n1"), h("desktop-pc")

	nonRoutedHere := reason{method: "direct", end: "this host", has: []string{"this host has no route", "non-routed"}, hasNot: []string{"the target is", "NAT"}}
	t.Run("public target", func(t *testing.T) {
		t.Parallel()
		checkDoctor(t, ctx, o, g5k, das3v, false, []reason{
			nonRoutedHere,
			// das3v-n1 calls back to g5k-n1's private address: this host's
			// address is out of its reach, the target routes fine.
			{method: "reverse", end: "this host", has: []string{"this host's addresses", "private", "this host has no default route"}, hasNot: []string{"the target is", "the target has no route"}},
			{method: "routed", ok: true},
		})
	})
	t.Run("NATed target", func(t *testing.T) {
		t.Parallel()
		checkDoctor(t, ctx, o, das3v, desktop, true, []reason{
			{method: "direct", end: "target", has: []string{"the target is behind a NAT", "198.51.100.161"}, hasNot: []string{"non-routed", "this host"}},
			{method: "reverse", ok: true},
		})
	})
	nonRoutedThere := []reason{
		{method: "direct", end: "target", has: []string{"the target's addresses", "private to its site", "the target has no default route"}, hasNot: []string{"NAT", "this host has", "this host is"}},
		{method: "reverse", end: "target", has: []string{"the target has no route to this host", "non-routed"}, hasNot: []string{"this host is", "this host has no"}},
		{method: "splice", end: "target", has: []string{"the target's NAT could not be classified"}, hasNot: []string{"this host's NAT"}},
		{method: "routed", ok: true},
	}
	t.Run("non-routed target", func(t *testing.T) {
		t.Parallel()
		checkDoctor(t, ctx, o, das3v, g5k, false, nonRoutedThere)
	})
	t.Run("ssh-only site", func(t *testing.T) {
		t.Parallel()
		checkDoctor(t, ctx, o, das3v, hiroshi, false, nonRoutedThere)
		checkDoctor(t, ctx, o, hiroshi, das3v, false, []reason{nonRoutedHere,
			{method: "splice", end: "this host", has: []string{"this host's NAT could not be classified"}, hasNot: []string{"the target"}},
			{method: "routed", ok: true}})
	})
}

// Random-port NATs at either end of a splice (issue 17): the diagnosis
// names the end whose NAT picks its ports at random; a host without NAT
// never hears that its own NAT does (TestNATZooOverlay).
func natZooDoctorReasons(t *testing.T, topo *topology.Topology, o *matrix.Overlay) {
	ctx := context.Background()
	pub := labtest.Host(t, topo, "public-server")
	random, preserve := labtest.Host(t, topo, "random-h"), labtest.Host(t, topo, "preserve-h")
	t.Run("random NAT at the target", func(t *testing.T) {
		checkDoctor(t, ctx, o, preserve, random, false, []reason{
			{method: "splice", end: "target", has: []string{"the target's NAT picks its ports at random"}, hasNot: []string{"this host's NAT"}},
			{method: "routed", ok: true},
		})
	})
	t.Run("random NAT at this host", func(t *testing.T) {
		checkDoctor(t, ctx, o, random, preserve, false, []reason{
			{method: "splice", end: "this host", has: []string{"this host's NAT", "random"}, hasNot: []string{"the target's NAT"}},
			{method: "routed", ok: true},
		})
	})
	t.Run("no NAT here, random NAT there", func(t *testing.T) {
		checkDoctor(t, ctx, o, pub, random, false, []reason{
			{method: "splice", end: "target", has: []string{"the target's NAT picks its ports at random"}, hasNot: []string{"this host's NAT"}},
			{method: "reverse", ok: true},
		})
	})
}
