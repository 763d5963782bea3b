package vconn

import (
	"net/netip"
	"slices"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
)

// Hidden networks (Config.Hide): a virtual network carried over the
// overlay (package vip) puts addresses on this host that lead back into
// the overlay. A node neither advertises them (its direct listener's
// addresses) nor counts them as its networks, and never dials a target
// at one: a "direct" connection through the virtual network would carry
// the overlay inside itself.

// hidden reports whether a lies in one of the hidden networks.
func (n *Node) hidden(a netip.Addr) bool {
	a = a.Unmap()
	return slices.ContainsFunc(n.cfg.Hide, func(p netip.Prefix) bool { return p.Contains(a) })
}

// localPrefixes are this host's interface prefixes but the hidden ones.
func (n *Node) localPrefixes() []netip.Prefix {
	local, _ := direct.LocalPrefixes()
	if len(n.cfg.Hide) == 0 {
		return local
	}
	return slices.DeleteFunc(local, func(p netip.Prefix) bool { return n.hidden(p.Addr()) })
}

// unhidden is target without addresses in the hidden networks.
func (n *Node) unhidden(target identity.Machine) identity.Machine {
	if len(n.cfg.Hide) == 0 {
		return target
	}
	keep := func(aps []netip.AddrPort) []netip.AddrPort {
		return slices.DeleteFunc(slices.Clone(aps), func(ap netip.AddrPort) bool { return n.hidden(ap.Addr()) })
	}
	target.Addrs, target.Observed = keep(target.Addrs), keep(target.Observed)
	return target
}
