package topology_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab/topologies"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

func builtin(t *testing.T, name string, over map[string]string) *topology.Topology {
	t.Helper()
	src, ok := topologies.Source(name)
	if !ok {
		t.Fatalf("no built-in topology %s", name)
	}
	topo, err := topology.Parse(name+".topo", src, over)
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	return topo
}

func TestBuiltinsParse(t *testing.T) {
	for _, name := range topologies.Names() {
		t.Run(name, func(t *testing.T) { builtin(t, name, nil) })
	}
	if got := strings.Join(topologies.Names(), " "); got != "grid6 hubpaths nat-hubs nat-reject nat-zoo routed sshsite wan" {
		t.Errorf("built-in topologies = %q", got)
	}
}

func TestGrid6(t *testing.T) {
	g := builtin(t, "grid6", nil)
	var names []string
	for _, s := range g.Sites {
		names = append(names, s.Name)
		if s.Name != "desktop" {
			var fe, nodes int
			for _, h := range s.Hosts {
				switch h.Role {
				case "frontend":
					fe++
				case "node":
					nodes++
				}
			}
			if fe != 1 || nodes < 2 {
				t.Errorf("site %s: %d frontends, %d nodes; want 1 and at least 2", s.Name, fe, nodes)
			}
		}
	}
	if got := strings.Join(names, " "); got != "das3v das3d rockstar g5k hiroshi desktop" {
		t.Errorf("sites = %s", got)
	}
	// RTT 166 ms scaled by 0.1: one-way 8.3 ms.
	if l := g.LinkFor("rockstar", "das3v"); l == nil || l.Delay != 8300*time.Microsecond {
		t.Errorf("das3v-rockstar link = %+v, want one-way 8.3ms", l)
	}
	if n := len(g.Links); n != 15 {
		t.Errorf("%d links, want 15 (every pair of 6 sites)", n)
	}
	// the overlapping private range of the paper's section 4.1.
	v1, _ := g.Host("das3v-n1")
	d1, _ := g.Host("das3d-n1")
	if v1.Ifaces[1].Addr != d1.Ifaces[1].Addr {
		t.Errorf("das3v-n1 lan %s and das3d-n1 lan %s should be the same address", v1.Ifaces[1].Addr, d1.Ifaces[1].Addr)
	}
	g5 := g.Site("g5k")
	if _, _, ok := g5.MatrixHost().DefaultRoute(); ok {
		t.Errorf("g5k compute node must be non-routed")
	}
	h := g.Site("hiroshi")
	if h.NAT != topology.NATPreserve || len(h.Forwards) != 1 || h.Forwards[0].Port != 22 || h.Forwards[0].Host.Name != "fe" {
		t.Errorf("hiroshi: nat %s forwards %+v", h.NAT, h.Forwards)
	}
	if len(h.Out) != 1 || h.Out[0].String() != "tcp/22" {
		t.Errorf("hiroshi out = %v", h.Out)
	}
	if pc, err := g.Host("desktop"); err != nil || pc.ID() != "desktop-pc" {
		t.Errorf("Host(desktop) = %v, %v", pc, err)
	}
}

func TestAddressing(t *testing.T) {
	src := `
site a wan=198.51.100.200
  net pub 198.51.100.0/28 public
  net lan 10.0.0.0/28
  host x nets=pub,lan
  host y nets=pub,lan pub=198.51.100.10
  host z nets=lan
`
	topo, err := topology.Parse("t.topo", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"x": {"198.51.100.11", "10.0.0.10"},
		"y": {"198.51.100.10", "10.0.0.11"},
		"z": {"10.0.0.12"},
	}
	for name, addrs := range want {
		h, err := topo.Host(name)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ifc := range h.Ifaces {
			got = append(got, ifc.Addr.String())
		}
		if strings.Join(got, " ") != strings.Join(addrs, " ") {
			t.Errorf("host %s addresses %v, want %v", name, got, addrs)
		}
	}
	s := topo.Site("a")
	if s.Nets[0].Gateway != netip.MustParseAddr("198.51.100.1") || s.Nets[1].Gateway.IsValid() {
		t.Errorf("gateways %v %v", s.Nets[0].Gateway, s.Nets[1].Gateway)
	}
	if s.WAN != netip.MustParseAddr("198.51.100.200") {
		t.Errorf("wan %v", s.WAN)
	}
}

func TestParams(t *testing.T) {
	w := builtin(t, "wan", map[string]string{"rtt": "10ms", "rate": "1gbit", "loss": "0.1%"})
	l := w.LinkFor("a", "b")
	if l.Delay != 5*time.Millisecond || l.Rate != 1e9 || l.Loss != 0.001 {
		t.Errorf("link = %+v", l)
	}
	_, err := topology.Parse("wan.topo", mustSource(t, "wan"), map[string]string{"bogus": "1"})
	if err == nil || !strings.Contains(err.Error(), `no parameter "bogus"`) || !strings.Contains(err.Error(), "loss, rate, rtt") {
		t.Errorf("unknown override: %v", err)
	}
	g := builtin(t, "grid6", map[string]string{"factor": "1.0"})
	if d := g.LinkFor("das3v", "hiroshi").Delay; d != 264*time.Millisecond {
		t.Errorf("factor 1.0: das3v-hiroshi one-way %v, want 264ms", d)
	}
}

func mustSource(t *testing.T, name string) []byte {
	src, ok := topologies.Source(name)
	if !ok {
		t.Fatal(name)
	}
	return src
}

// Every malformed input names file, line and field.
func TestErrors(t *testing.T) {
	base := "site a\n  net pub 198.51.100.0/28 public\n  host x nets=pub\n"
	cases := []struct {
		src, want string
	}{
		{"bogus x\n", "t.topo:1: bogus: unknown directive"},
		{"site A\n", "t.topo:1: site: bad site name"},
		{"net pub 198.51.100.0/28 public\n", "t.topo:1: net: net outside a site"},
		{"site a\n  net pub 8.8.8.0/24 public\n", "t.topo:2: prefix: public net 8.8.8.0/24 is not inside the documentation ranges"},
		{"site a\n  net lan 198.51.100.0/24\n", "t.topo:2: prefix: isolated net 198.51.100.0/24 is not inside a private range"},
		{"site a\n  net pub 198.51.100.1/28 public\n", "t.topo:2: prefix: 198.51.100.1/28 has host bits set"},
		{"site a\n  net pub 198.51.100.0/28 public\n  host x nets=lan\n", `t.topo:3: nets: unknown net "lan" (site a has: pub`},
		{"site a\n  net pub 198.51.100.0/28 public\n  host x nets=pub pub=10.0.0.1\n", `t.topo:3: pub: bad address "10.0.0.1"`},
		{"site a\n  net pub 198.51.100.0/28 public\n  host x nets=pub colour=red\n", "t.topo:3: colour: unknown host field"},
		{"site a\n  net lan 10.0.0.0/24\n  host x nets=lan\n", "t.topo:1: wan: site a: has no public net"},
		{"site a\n", "t.topo:1: site: site a: has no hosts"},
		{"site a nat=full\n", `t.topo:1: nat: unknown behaviour "full"`},
		{"site a firewall=stateful in=tcp/0\n", `t.topo:1: in: bad port "tcp/0"`},
		{"site a in=tcp/22\n", "t.topo:1: firewall: in=, out= and inbound= need firewall=stateful"},
		{"site a wan=10.0.0.1\n", "t.topo:1: wan: 10.0.0.1 is not in the documentation ranges"},
		{"site a wan=198.51.100.1 nat=preserve igd=yes\n", `t.topo:1: igd: unknown value "yes" (want on or off)`},
		{"site a igd=on\n", "t.topo:1: igd: igd=on needs a NAT"},
		{"site a colour=red\n", "t.topo:1: colour: unknown site field (want wan, firewall, in, out, inbound, nat or igd)"},
		{base + "link a b rtt=fast\n", `t.topo:4: rtt: bad duration "fast"`},
		{base + "link a b rate=lots\n", `t.topo:4: rate: bad rate "lots"`},
		{base + "link a b loss=2\n", `t.topo:4: loss: bad loss "2"`},
		{base + "link a c\n", `t.topo:4: link: unknown site "c"`},
		{base + "link a a\n", "t.topo:4: link: a link joins two different sites"},
		{base + "link a b rtt=$x\n", "t.topo:4: rtt=$x: unknown parameter $x"},
		{base + "forward tcp/22 x\n", "t.topo:4: forward: site a has no NAT"},
		{"site a wan=198.51.100.1 nat=preserve\n  net lan 10.0.0.0/24 nat\n  host x nets=lan\n  forward tcp/22 y\n", `t.topo:4: forward: unknown host "y"`},
		{"site a\n  net lan 10.0.0.0/24 nat\n", "t.topo:2: nat: net lan is nat but site a has no NAT"},
		{base + "site b\n  net pub 198.51.100.0/28 public\n  host x nets=pub\n", "t.topo:4: site: site b: public address space 198.51.100.1/32 overlaps site a's"},
		{base + "  host x nets=pub\n", `t.topo:4: host: host "x" defined twice`},
		{"param p\n", "t.topo:1: param: want 'param NAME DEFAULT'"},
		{"scale -1\n", "t.topo:1: scale: bad factor"},
		{"site a\n  net pub 198.51.100.0/29 public\n  host a nets=pub\n  host b nets=pub\n  host c nets=pub\n  host d nets=pub\n", "net pub (198.51.100.0/29) has no address left for host"},
	}
	for _, c := range cases {
		_, err := topology.Parse("t.topo", []byte(c.src), nil)
		var te *topology.Error
		if err == nil || !errors.As(err, &te) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q)\n  error %v\n  want  %q", c.src, err, c.want)
		}
	}
}

func TestUnits(t *testing.T) {
	for in, want := range map[string]int64{"400mbit": 400e6, "1Gbit": 1e9, "512kbit": 512e3, "0": 0, "1.5mbit": 1.5e6} {
		if got, err := topology.ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, want := range map[string]int{"1.5mb": 1500000, "64kib": 65536, "100": 100, "2MiB": 2 << 20} {
		if got, err := topology.ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "mbit", "-1mbit", "4 mbit", "1.2.3mbit", "NaN"} {
		if _, err := topology.ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) accepted", bad)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range topologies.Names() {
		src, _ := topologies.Source(name)
		f.Add(src)
	}
	f.Add([]byte("site a\n net pub 198.51.100.0/28 public\n host x nets=pub pub=198.51.100.14\nlink * * rtt=1ms\n"))
	f.Add([]byte("site a wan=203.0.113.9 nat=random igd=on\n net lan 10.0.0.0/24 nat\n host x nets=lan\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		topo, err := topology.Parse("f.topo", src, nil)
		if err != nil {
			var te *topology.Error
			if !errors.As(err, &te) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		for _, h := range topo.Hosts() {
			for _, ifc := range h.Ifaces {
				if !ifc.Net.Prefix.Contains(ifc.Addr) {
					t.Fatalf("host %s: address %s outside %s", h.ID(), ifc.Addr, ifc.Net.Prefix)
				}
			}
		}
	})
}

func TestNATZoo(t *testing.T) {
	z := builtin(t, "nat-zoo", nil)
	var igd []string
	for _, s := range z.Sites {
		if s.IGD {
			igd = append(igd, s.Name)
		}
	}
	if got := strings.Join(igd, " "); got != "igd" {
		t.Fatalf("sites with igd=on: %q, want igd", got)
	}
	s := z.Site("igd")
	h := mustHost(t, z, "igd-h")
	if s.NAT != topology.NATRandom || s.WAN != netip.MustParseAddr("203.0.113.21") ||
		h.Ifaces[0].Addr != netip.MustParseAddr("192.168.15.10") || h.Ifaces[0].Net.Kind != topology.NetNAT {
		t.Errorf("site igd: nat %s wan %s, host %s on %s (%s)", s.NAT, s.WAN, h.ID(), h.Ifaces[0].Addr, h.Ifaces[0].Net.Kind)
	}
}

func mustHost(t *testing.T, topo *topology.Topology, name string) *topology.Host {
	t.Helper()
	h, err := topo.Host(name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// nat-reject: two NATs that reset unsolicited SYNs (inbound=reject on a NAT
// site, without a firewall), a hub and a node behind each, one public hub.
func TestNATReject(t *testing.T) {
	g := builtin(t, "nat-reject", nil)
	for _, name := range []string{"east", "west"} {
		s := g.Site(name)
		if s == nil || s.NAT != topology.NATPreserve || !s.Reject || s.Firewall != topology.FirewallNone {
			t.Fatalf("site %s = %+v, want a preserving NAT that rejects, no firewall", name, s)
		}
		var roles []string
		for _, h := range s.Hosts {
			roles = append(roles, h.Role)
		}
		if got := strings.Join(roles, " "); got != "frontend node" {
			t.Errorf("site %s roles %q, want a hub (frontend) and a node", name, got)
		}
	}
	if p := g.Site("public"); p == nil || p.NAT != topology.NATNone || p.Firewall != topology.FirewallNone {
		t.Errorf("public site = %+v, want open", p)
	}
	if l := g.LinkFor("east", "west"); l == nil || l.Delay != 100*time.Microsecond {
		t.Errorf("east-west link = %+v, want one-way 0.1 ms", l)
	}
	if l := builtin(t, "nat-reject", map[string]string{"rtt": "10ms"}).LinkFor("east", "west"); l == nil || l.Delay != 5*time.Millisecond {
		t.Errorf("east-west link with rtt=10ms = %+v, want one-way 5 ms", l)
	}
}
