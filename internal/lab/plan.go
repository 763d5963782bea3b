package lab

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/gridlink/gridlink/internal/lab/topology"
)

// Namespace names. Every namespace the lab makes starts with Prefix, which
// is how leftovers of a crashed run are found.
const (
	Prefix   = "gl-"
	SwitchNS = Prefix + "sw"   // holds the bridges: one per site net, layer 2 only
	InetNS   = Prefix + "inet" // the lab internet: runs the link emulator, has no addresses
	WANDev   = "wan0"          // the gateway's TUN device, attached to the emulator
)

// HostNS is the namespace of a host.
func HostNS(h *topology.Host) string { return Prefix + h.ID() }

// GatewayNS is the namespace of a site's gateway.
func GatewayNS(s *topology.Site) string { return Prefix + s.Name + "-gw" }

// Step is one batch of commands run in one namespace.
type Step struct {
	What string   // for messages
	NS   string   // namespace, or "" for the root namespace
	Tool string   // "ip" (ip -batch), "nft" (nft -f), "sysctl" or "file"
	Body []string // batch lines; a file's lines
	File string   // Tool "file": the file written (netnsetc.go)
}

// Shell renders the step as a shell command, for --dry-run and errors.
func (s Step) Shell() string {
	var head string
	switch {
	case s.Tool == "ip" && s.NS == "":
		head = "ip -batch - <<'EOF'"
	case s.Tool == "ip":
		head = fmt.Sprintf("ip -n %s -batch - <<'EOF'", s.NS)
	case s.Tool == "nft" && s.NS == "":
		head = "nft -f - <<'EOF'"
	case s.Tool == "nft":
		head = fmt.Sprintf("ip netns exec %s nft -f - <<'EOF'", s.NS)
	case s.Tool == "sysctl":
		return fmt.Sprintf("# %s\nip netns exec %s sysctl -q -w %s\n", s.What, s.NS, strings.Join(s.Body, " "))
	case s.Tool == "file":
		head = fmt.Sprintf("mkdir -p %s && cat > %s <<'EOF'", filepath.Dir(s.File), s.File)
	}
	return fmt.Sprintf("# %s\n%s\n%s\nEOF\n", s.What, head, strings.Join(s.Body, "\n"))
}

// Plan turns a topology into the commands that build it, in order.
func Plan(t *topology.Topology) []Step {
	var steps []Step
	all := []string{InetNS, SwitchNS}
	for _, s := range t.Sites {
		all = append(all, GatewayNS(s))
		for _, h := range s.Hosts {
			all = append(all, HostNS(h))
		}
	}
	var add []string
	for _, ns := range all {
		add = append(add, "netns add "+ns)
	}
	steps = append(steps, Step{What: "namespaces", Tool: "ip", Body: add})
	// their names, before anything runs in them (netnsetc.go)
	steps = append(steps, etcSteps(t, all)...)

	// sysctls first, so interfaces made later inherit "no IPv6".
	for _, ns := range all {
		fwd := "0"
		if strings.HasSuffix(ns, "-gw") {
			fwd = "1"
		}
		steps = append(steps, Step{What: "sysctls of " + ns, NS: ns, Tool: "sysctl", Body: []string{
			"net.ipv6.conf.all.disable_ipv6=1",
			"net.ipv6.conf.default.disable_ipv6=1",
			"net.ipv4.ip_forward=" + fwd,
			"net.ipv4.conf.all.rp_filter=0",
			"net.ipv4.conf.default.rp_filter=0",
		}})
	}

	// the switch: a bridge per site net, a veth per attachment whose other
	// end is made directly in the host's or gateway's namespace.
	sw := []string{"link set lo up"}
	for si, s := range t.Sites {
		for ni, n := range s.Nets {
			br := bridgeName(si, ni)
			sw = append(sw, fmt.Sprintf("link add %s type bridge mcast_snooping 0", br), fmt.Sprintf("link set %s up", br))
			if n.Routed() {
				v := fmt.Sprintf("v%dgn%d", si, ni)
				sw = append(sw,
					fmt.Sprintf("link add %s type veth peer name %s netns %s", v, n.Name, GatewayNS(s)),
					fmt.Sprintf("link set %s master %s up", v, br))
			}
			for hi, h := range s.Hosts {
				if h.IfaceOn(n) == nil {
					continue
				}
				v := fmt.Sprintf("v%dh%dn%d", si, hi, ni)
				sw = append(sw,
					fmt.Sprintf("link add %s type veth peer name %s netns %s", v, n.Name, HostNS(h)),
					fmt.Sprintf("link set %s master %s up", v, br))
			}
		}
	}
	steps = append(steps,
		Step{What: "lab internet", NS: InetNS, Tool: "ip", Body: []string{"link set lo up"}},
		Step{What: "switch", NS: SwitchNS, Tool: "ip", Body: sw})

	for _, s := range t.Sites {
		gw := []string{"link set lo up",
			fmt.Sprintf("tuntap add dev %s mode tun", WANDev),
			fmt.Sprintf("link set %s up", WANDev)}
		onNet := false
		for _, n := range s.Nets {
			if n.Routed() {
				gw = append(gw,
					fmt.Sprintf("addr add %s/%d dev %s", n.Gateway, n.Prefix.Bits(), n.Name),
					fmt.Sprintf("link set %s up", n.Name))
				onNet = onNet || n.Gateway == s.WAN
			}
		}
		if !onNet {
			gw = append(gw, fmt.Sprintf("addr add %s/32 dev %s", s.WAN, WANDev))
		}
		gw = append(gw, fmt.Sprintf("route add default dev %s", WANDev))
		steps = append(steps, Step{What: "gateway of " + s.Name, NS: GatewayNS(s), Tool: "ip", Body: gw})
		if rules := Ruleset(s); rules != nil {
			steps = append(steps, Step{What: "firewall and NAT of " + s.Name, NS: GatewayNS(s), Tool: "nft", Body: rules})
		}
		if s.IGD {
			steps = append(steps, Step{What: "IGD table of " + s.Name, NS: GatewayNS(s), Tool: "nft", Body: igdRuleset(s)})
		}
		for _, h := range s.Hosts {
			hb := []string{"link set lo up"}
			for _, ifc := range h.Ifaces {
				hb = append(hb,
					fmt.Sprintf("addr add %s/%d dev %s", ifc.Addr, ifc.Net.Prefix.Bits(), ifc.Net.Name),
					fmt.Sprintf("link set %s up", ifc.Net.Name))
			}
			if gwAddr, n, ok := h.DefaultRoute(); ok {
				hb = append(hb, fmt.Sprintf("route add default via %s dev %s", gwAddr, n.Name))
			}
			steps = append(steps, Step{What: "host " + h.ID(), NS: HostNS(h), Tool: "ip", Body: hb})
		}
	}
	steps = append(steps, Step{What: "guard of the root namespace", Tool: "nft", Body: GuardRuleset()})
	return steps
}

func bridgeName(site, net int) string { return fmt.Sprintf("b%dn%d", site, net) }

// GuardTable is the nftables table that keeps the root namespace from
// sending to lab addresses while a lab is up: the lab's "public" ranges are
// routed to the machine's real network from there, and a test that opens
// a socket outside the namespace it meant (a goroutine on another thread
// than netns.Do's) must fail at once, not leak onto that network.
const GuardTable = "gridlab-guard"

// GuardRuleset rejects, in the root namespace, every packet to the lab's
// address ranges.
func GuardRuleset() []string {
	var ranges []string
	for _, p := range topology.LabRanges() {
		ranges = append(ranges, p.String())
	}
	return []string{
		"table inet " + GuardTable + " {",
		"  chain output {",
		"    type filter hook output priority filter; policy accept;",
		"    ip daddr { " + strings.Join(ranges, ", ") + " } counter reject with icmpx type admin-prohibited",
		"  }",
		"}",
	}
}
