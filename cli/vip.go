package cli

import (
	"fmt"
	"net/netip"
	"os"

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
}

func (vf *vipFlags) add(c *cobra.Command) {
	f := c.Flags()
	f.BoolVar(&vf.on, "vip", false, "join the grid's virtual IP network: a TUN device holding this node's virtual addresses, packets to other nodes' carried over the overlay (needs a hub, and root or CAP_NET_ADMIN)")
	f.StringVar(&vf.prefix4, "vip-prefix4", gridlink.DefaultVIPPrefix4.String(), "the virtual network's IPv4 prefix (the same on every node of the grid)")
	f.StringVar(&vf.prefix6, "vip-prefix6", gridlink.DefaultVIPPrefix6.String(), "the virtual network's IPv6 prefix (the same on every node of the grid)")
	f.StringVar(&vf.dev, "vip-dev", gridlink.DefaultVIPDevice, "the TUN device's name")
	f.IntVar(&vf.mtu, "vip-mtu", gridlink.DefaultVIPMTU, "the tunnel MTU (not bound by the paths': packets travel in TCP streams)")
}

// config checks the flags; a --vip-* flag without --vip is refused.
func (vf *vipFlags) config(c *cobra.Command) (gridlink.VIPConfig, error) {
	if !vf.on {
		for _, name := range []string{"vip-prefix4", "vip-prefix6", "vip-dev", "vip-mtu"} {
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
	return gridlink.VIPConfig{On: true, Prefix4: p4, Prefix6: p6, Device: vf.dev, MTU: vf.mtu}, nil
}

// printVIPStart says where the node is on the virtual network.
func printVIPStart(a *gridlink.Agent) {
	if addrs, dev := a.VirtualAddrs(); len(addrs) > 0 {
		fmt.Fprintf(os.Stderr, "gridlink node %s: virtual network on %s: %v\n", a.Node().Name(), dev, addrs)
	}
}

// printVIPStatus prints the virtual network's part of gridlink status.
func printVIPStatus(v *status.VIP) {
	if v == nil {
		return
	}
	fmt.Printf("virtual network on %s (mtu %d): %v\n", v.Device, v.MTUBytes, v.Addrs)
	if v.Claim != "" {
		fmt.Printf("  addresses refused: %s\n", v.Claim)
	}
	for _, p := range v.Peers {
		name := p.Name
		if name == "" {
			name = p.ID.Short()
		}
		path := p.Path
		if path == "" {
			path = "no connection"
		}
		fmt.Printf("  peer %s %v via %s: sent %d packets (%d bytes), received %d packets (%d bytes), dropped %d (queue full %d, connection lost %d, spoofed source %d)\n",
			name, p.Addrs, path, p.SentPackets, p.SentBytes, p.RecvPackets, p.RecvBytes,
			p.QueueFullPackets+p.ConnLostPackets+p.SpoofedPackets, p.QueueFullPackets, p.ConnLostPackets, p.SpoofedPackets)
	}
	d := v.Drops
	fmt.Printf("  dropped: %d malformed, %d not unicast, %d not from this node, %d too big, %d to no node, %d queue full, %d connection lost, %d unreachable peer, %d spoofed, %d not for this node, %d refused by the device\n",
		d.MalformedPackets, d.NotUnicastPackets, d.SourceNotOursPackets, d.TooBigPackets, d.NoRoutePackets, d.QueueFullPackets,
		d.ConnLostPackets, d.NoConnectionPackets, d.SpoofedPackets, d.NotForUsPackets, d.DeviceWritePackets)
}
