package matrix

import (
	"slices"
	"strings"
	"testing"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

func grid6(t *testing.T) *topology.Topology {
	t.Helper()
	topo, _, err := lab.Load("grid6", nil)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// Where hubs run and how they and the nodes reach each other on grid6.
func TestOverlayPlan(t *testing.T) {
	g := grid6(t)
	spec := map[string]string{}
	for _, s := range g.Sites {
		spec[s.Name] = hubSpec(s)
	}
	want := map[string]string{
		"das3v":    "198.51.100.10:7946",
		"g5k":      "198.51.100.106:7946",
		"hiroshi":  "ssh://root@198.51.100.129:22/127.0.0.1:7946", // only through its sshd
		"desktop":  "",                                            // behind a NAT: links outward only
		"rockstar": "198.51.100.74:7946",
	}
	for site, w := range want {
		if spec[site] != w {
			t.Errorf("hub spec of %s = %q, want %q", site, spec[site], w)
		}
	}
	from := func(host string) string {
		h, err := g.Host(host)
		if err != nil {
			t.Fatal(err)
		}
		return hubFrom(h)
	}
	if got := from("g5k-n1"); got != "10.4.0.10:7946" { // non-routed: its frontend's private address
		t.Errorf("g5k-n1 reaches its hub at %s", got)
	}
	if got := from("desktop-pc"); got != "127.0.0.1:7946" { // the hub runs on the same machine
		t.Errorf("desktop-pc reaches its hub at %s", got)
	}
	if fb := fallbackHub(g, mustHost(t, g, "das3v-n1")); fb == "" || strings.HasPrefix(fb, "ssh://") {
		t.Errorf("das3v-n1 fallback hub %q, want another site's public hub", fb)
	}
	if fb := fallbackHub(g, mustHost(t, g, "g5k-n1")); fb != "" {
		t.Errorf("a non-routed node cannot fall back to another site's hub, got %q", fb)
	}
}

func mustHost(t *testing.T, g *topology.Topology, name string) *topology.Host {
	h, err := g.Host(name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestBounds(t *testing.T) {
	g := grid6(t)
	m := &Matrix{Sites: []string{"rockstar", "das3v", "g5k"}, Pairs: []Pair{
		{Src: "rockstar", Dst: "das3v", Plain: Result{OK: true, MS: 17}, Gridlink: &GridlinkResult{OK: true, Method: "direct", Cached: "direct", FirstMS: 40, CachedMS: 33, RTTMS: 17}},
		{Src: "das3v", Dst: "rockstar", Gridlink: &GridlinkResult{OK: true, Method: "reverse", Cached: "reverse", FirstMS: 160, CachedMS: 55, RTTMS: 17}},
		{Src: "das3v", Dst: "g5k", Gridlink: &GridlinkResult{OK: true, Method: "routed", Cached: "routed", FirstMS: 60, CachedMS: 13, RTTMS: 7}},
		{Src: "g5k", Dst: "das3v"},
	}}
	bs := Bounds(m, g)
	// rtt 16.6: first ≤ 149.8; cached direct ≤ 17 + 17
	if b := bs[0]; !b.OK || b.FirstMaxMS < 149.7 || b.FirstMaxMS > 149.9 || b.CachedMaxMS != 34 {
		t.Errorf("direct bound %+v", b)
	}
	if b := bs[1]; b.OK {
		t.Errorf("uncached 160 ms over 149.8 passed: %+v", b)
	}
	if b := bs[2]; b.OK || b.CachedMaxMS != 12 {
		t.Errorf("cached routed 13 ms over 7+5 passed: %+v", b)
	}
	if bs[3].OK {
		t.Errorf("a failed pair is within its bounds: %+v", bs[3])
	}
	var out strings.Builder
	WriteBounds(&out, bs)
	if !strings.Contains(out.String(), "1 of 4 pairs within") || !strings.Contains(out.String(), "OVER") {
		t.Errorf("bounds table:\n%s", out.String())
	}
}

func TestTable(t *testing.T) {
	m := &Matrix{Sites: []string{"a", "b"}, Pairs: []Pair{
		{Src: "a", Dst: "b", Plain: Result{OK: true, MS: 1.25}, Gridlink: &GridlinkResult{OK: true, Method: "reverse", FirstMS: 12.5}},
		{Src: "b", Dst: "a", Gridlink: &GridlinkResult{OK: false}},
	}}
	var out strings.Builder
	m.WriteTable(&out, []string{"plain", "gridlink"}, []Cell{PlainCell, GridlinkCell})
	lines := strings.Split(out.String(), "\n")
	// row "b" (target b): column a holds a->b.
	if !strings.Contains(lines[3], "1.2") || !strings.Contains(lines[3], "12.5 r") {
		t.Errorf("row for target b: %q", lines[3])
	}
	if !strings.Contains(lines[2], "-") {
		t.Errorf("row for target a should show b->a as no connection: %q", lines[2])
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{0.9, 0.5, 1.1, 0.6, 0.7, 2.0, 0.6, 0.8, 0.5, 3.3}, 0.75},
	} {
		in := slices.Clone(c.xs)
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
		if !slices.Equal(in, c.xs) {
			t.Errorf("median reordered its input: %v", c.xs)
		}
	}
}

// Which hosts run node agents, and with which arguments, as Options say.
func TestOverlayOptions(t *testing.T) {
	g := grid6(t)
	var ids []string
	for _, h := range (Options{}).hosts(g) {
		ids = append(ids, h.ID())
	}
	if want := []string{"das3v-n1", "das3d-n1", "rockstar-n1", "g5k-n1", "hiroshi-n1", "desktop-pc"}; !slices.Equal(ids, want) {
		t.Errorf("default hosts %v, want %v", ids, want)
	}
	if args := (Options{}).nodeArgs(g.Sites[0].MatrixHost()); len(args) != 0 {
		t.Errorf("default node args %v, want none", args)
	}
	n2 := g.Site("g5k").Hosts[2]
	o := Options{VIP: true, Hosts: []*topology.Host{n2}, NodeArgs: func(h *topology.Host) []string { return []string{"--x", h.ID()} }}
	if hs := o.hosts(g); len(hs) != 1 || hs[0] != n2 {
		t.Errorf("hosts %v, want [%s]", hs, n2.ID())
	}
	if args, want := o.nodeArgs(n2), []string{"--vip", "--x", "g5k-n2"}; !slices.Equal(args, want) {
		t.Errorf("node args %v, want %v", args, want)
	}
}
