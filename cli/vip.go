package cli

import (
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/status"
)

// vipFlags are gridlink node's virtual network flags.
type vipFlags struct {
	on               bool
	prefix4, prefix6 string
	dev              string
	mtu              int
	carriers         int
	names            bool
	zone, dns        string
	resolver         string
	allow            gridlink.VIPRules
	rulesFile        string
}

// rulesValue is --vip-allow: each one adds its entries ("WHO WHAT..."
// or "allow WHO WHAT...", several separated by ';').
type rulesValue struct{ r *gridlink.VIPRules }

func (v rulesValue) Set(s string) error {
	entries := strings.Split(s, ";")
	for i, e := range entries {
		if f := strings.Fields(e); len(f) > 0 && f[0] != "allow" {
			entries[i] = "allow " + e
		}
	}
	return v.r.Set(strings.Join(entries, ";"))
}
func (v rulesValue) String() string { return "" }
func (v rulesValue) Type() string   { return "RULE" }

// vipFlagNames are the --vip-* flags, which need --vip.
var vipFlagNames = []string{"vip-prefix4", "vip-prefix6", "vip-dev", "vip-mtu", "vip-carriers", "vip-names", "vip-zone", "vip-dns", "vip-resolver", "vip-allow", "vip-rules"}

func (vf *vipFlags) add(c *cobra.Command) {
	f := c.Flags()
	f.BoolVar(&vf.on, "vip", false, "join the grid's virtual IP network: a TUN device holding this node's virtual addresses, packets to other nodes' carried over the overlay (needs a hub, and root or CAP_NET_ADMIN)")
	f.StringVar(&vf.prefix4, "vip-prefix4", gridlink.DefaultVIPPrefix4.String(), "the virtual network's IPv4 prefix (the same on every node of the grid)")
	f.StringVar(&vf.prefix6, "vip-prefix6", gridlink.DefaultVIPPrefix6.String(), "the virtual network's IPv6 prefix (the same on every node of the grid)")
	f.StringVar(&vf.dev, "vip-dev", gridlink.DefaultVIPDevice, "the TUN device's name")
	f.IntVar(&vf.mtu, "vip-mtu", gridlink.DefaultVIPMTU, "the tunnel MTU (not bound by the paths': packets travel in TCP streams)")
	f.IntVar(&vf.carriers, "vip-carriers", gridlink.DefaultVIPCarriers, "the most connections to one peer: while packets of several flows go to a peer on a shortcut, each flow on one of them (many congestion windows across a lossy long link, not one); the two nodes use the smaller of their counts; 1: one connection per peer")
	f.BoolVar(&vf.names, "vip-names", true, "serve the network's names (NODE.grid: the node's virtual addresses) and point this host's resolver at them until the node stops; --vip-names=false: neither")
	f.StringVar(&vf.zone, "vip-zone", "grid", "the names' zone (the same on every node of the grid)")
	f.StringVar(&vf.dns, "vip-dns", gridlink.DefaultNameServer, "where the name server listens (a resolv.conf names port 53 only)")
	f.StringVar(&vf.resolver, "vip-resolver", "auto", "how this host's resolver is pointed at the names: auto (netns in an 'ip netns' namespace, else systemd-resolved where it runs, else resolv.conf), netns, systemd-resolved, resolv.conf, or none (by hand, docs/vip.md)")
	f.Var(rulesValue{&vf.allow}, "vip-allow", `an access rule: who may reach which ports of this node over the virtual network, "[allow] WHO WHAT..." with WHO one of *, group:NAME, user:NAME, node:NAME and WHAT one of any, icmp, tcp, udp, tcp/PORTS, udp/PORTS (repeatable; with any rule, what no rule allows is refused; default: every member reaches everything)`)
	f.StringVar(&vf.rulesFile, "vip-rules", "", "a `FILE` of access rules (as --vip-allow, an entry a line, # comments), added to --vip-allow's")
}

// config checks the flags; a --vip-* flag without --vip is refused.
func (vf *vipFlags) config(c *cobra.Command) (gridlink.VIPConfig, error) {
	if !vf.on {
		for _, name := range vipFlagNames {
			if c.Flags().Changed(name) {
				return gridlink.VIPConfig{}, fmt.Errorf("--%s needs --vip", name)
			}
		}
		return gridlink.VIPConfig{}, nil
	}
	p4, err := netip.ParsePrefix(vf.prefix4)
	if err != nil || !p4.Addr().Is4() {
		return gridlink.VIPConfig{}, fmt.Errorf("--vip-prefix4 %q: want an IPv4 prefix such as %s", vf.prefix4, gridlink.DefaultVIPPrefix4)
	}
	p6, err := netip.ParsePrefix(vf.prefix6)
	if err != nil || !p6.Addr().Is6() {
		return gridlink.VIPConfig{}, fmt.Errorf("--vip-prefix6 %q: want an IPv6 prefix such as %s", vf.prefix6, gridlink.DefaultVIPPrefix6)
	}
	if vf.mtu < 1280 || vf.mtu > 65535 {
		return gridlink.VIPConfig{}, fmt.Errorf("--vip-mtu %d: want 1280 (IPv6's least) to 65535", vf.mtu)
	}
	if vf.carriers < 1 || vf.carriers > 255 {
		return gridlink.VIPConfig{}, fmt.Errorf("--vip-carriers %d: want 1 to 255", vf.carriers)
	}
	rules := vf.allow
	if vf.rulesFile != "" {
		fr, err := gridlink.ReadVIPRules(vf.rulesFile)
		if err != nil {
			return gridlink.VIPConfig{}, fmt.Errorf("--vip-rules: %w", err)
		}
		if err := rules.Set(fr.String()); err != nil {
			return gridlink.VIPConfig{}, fmt.Errorf("--vip-rules %s: %w", vf.rulesFile, err)
		}
	}
	method := gridlink.ResolverMethod(vf.resolver)
	switch method {
	case "auto":
		method = gridlink.ResolverAuto
	case gridlink.ResolverNetns, gridlink.ResolverResolved, gridlink.ResolverResolvConf, gridlink.ResolverNone:
	default:
		return gridlink.VIPConfig{}, fmt.Errorf("--vip-resolver %q: want auto, netns, systemd-resolved, resolv.conf or none", vf.resolver)
	}
	names := gridlink.VIPNames{Off: !vf.names, Addr: vf.dns, Zone: vf.zone, Resolver: method}
	if _, err := netip.ParseAddrPort(vf.dns); err != nil {
		return gridlink.VIPConfig{}, fmt.Errorf("--vip-dns %q: want ADDR:PORT such as %s", vf.dns, gridlink.DefaultNameServer)
	}
	return gridlink.VIPConfig{On: true, Prefix4: p4, Prefix6: p6, Device: vf.dev, MTU: vf.mtu, Carriers: vf.carriers, Rules: rules, Names: names}, nil
}

// printVIPStart says where the node is on the virtual network.
func printVIPStart(a *gridlink.Agent) {
	if addrs, dev := a.VirtualAddrs(); len(addrs) > 0 {
		fmt.Fprintf(os.Stderr, "gridlink node %s: virtual network on %s: %v\n", a.Node().Name(), dev, addrs)
	}
	st := a.VIPStatus()
	if st == nil {
		return
	}
	if n := st.Names; n != nil {
		fmt.Fprintf(os.Stderr, "gridlink node %s: names NODE.%s served on %s (host resolver: %s)\n", a.Node().Name(), n.Zone, n.Server, n.Resolver)
	}
	if st.Rules != "" {
		fmt.Fprintf(os.Stderr, "gridlink node %s: access rules: %s\n", a.Node().Name(), strings.ReplaceAll(st.Rules, "\n", "; "))
	}
}

// printVIPStatus prints the virtual network's part of gridlink status.
func printVIPStatus(v *status.VIP) {
	if v == nil {
		return
	}
	fmt.Printf("virtual network on %s (mtu %d): %v\n", v.Device, v.MTUBytes, v.Addrs)
	if n := v.Names; n != nil {
		fmt.Printf("  names NODE.%s on %s (host resolver: %s)\n", n.Zone, n.Server, n.Resolver)
	}
	if v.Rules != "" {
		fmt.Printf("  access rules: %s\n", strings.ReplaceAll(v.Rules, "\n", "; "))
	}
	if v.Claim != "" {
		fmt.Printf("  addresses refused: %s\n", status.PrintableLine(v.Claim))
	}
	for _, p := range v.Peers {
		name := status.Printable(p.Name) // from the hubs' directory
		if name == "" {
			name = p.ID.Short()
		}
		path := p.Path
		if path == "" {
			path = "no connection"
		}
		fmt.Printf("  peer %s %v via %s: sent %d packets (%d bytes), received %d packets (%d bytes), dropped %d (queue full %d, connection lost %d, spoofed source %d, denied by the access rules %d); refused by its rules %d\n",
			name, p.Addrs, path, p.SentPackets, p.SentBytes, p.RecvPackets, p.RecvBytes,
			p.QueueFullPackets+p.ConnLostPackets+p.SpoofedPackets+p.DeniedPackets, p.QueueFullPackets, p.ConnLostPackets, p.SpoofedPackets, p.DeniedPackets, p.RefusedPackets)
	}
	d := v.Drops
	fmt.Printf("  dropped: %d malformed, %d not unicast, %d not from this node, %d too big, %d to no node, %d queue full, %d connection lost, %d unreachable peer, %d spoofed, %d not for this node, %d refused by the device, %d denied by the access rules, %d fragments that cannot be judged\n",
		d.MalformedPackets, d.NotUnicastPackets, d.SourceNotOursPackets, d.TooBigPackets, d.NoRoutePackets, d.QueueFullPackets,
		d.ConnLostPackets, d.NoConnectionPackets, d.SpoofedPackets, d.NotForUsPackets, d.DeviceWritePackets, d.DeniedPackets, d.BadFragmentPackets)
}
