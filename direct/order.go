package direct

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
)

// Address classes, in the order they are tried (SmartSockets §3.2.2).
const (
	classPreferred = iota // in a network the user prefers
	classSameNet          // private, in one of our own private networks
	classPublic           // public (observed addresses usually are)
	classOtherNet         // private, in a network we are not on
)

// Order sorts a target's candidate addresses by the SmartSockets heuristic:
//
//  1. addresses in a preferred network, in the order of preferred;
//  2. private addresses that lie in one of our own private networks
//     (local): both machines on, say, 10.1.0.0/24, most likely a fast
//     cluster network;
//  3. public addresses, which include the addresses hubs observed;
//  4. other private addresses, which most likely name no machine we can
//     reach, or another one.
//
// Within a class the target's own order is kept. Private means RFC 1918,
// shared (100.64.0.0/10), loopback, link-local and unique-local IPv6.
// Duplicates, port 0 and unspecified or multicast addresses are dropped;
// IPv4-mapped IPv6 addresses are unmapped.
func Order(local, preferred []netip.Prefix, target []netip.AddrPort) []netip.AddrPort {
	type ranked struct {
		ap         netip.AddrPort
		class, sub int
	}
	var privLocal []netip.Prefix
	for _, p := range local {
		if p = unmapPrefix(p); p.IsValid() && isPrivate(p.Addr()) {
			privLocal = append(privLocal, p.Masked())
		}
	}
	seen := make(map[netip.AddrPort]bool, len(target))
	var rs []ranked
	for _, ap := range target {
		a := ap.Addr().Unmap()
		ap = netip.AddrPortFrom(a, ap.Port())
		if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() || ap.Port() == 0 || seen[ap] {
			continue
		}
		seen[ap] = true
		r := ranked{ap: ap, class: classPublic}
		switch {
		case preferredIndex(preferred, a) >= 0:
			r.class, r.sub = classPreferred, preferredIndex(preferred, a)
		case !isPrivate(a):
		case slices.ContainsFunc(privLocal, func(p netip.Prefix) bool { return p.Contains(a) }):
			r.class = classSameNet
		default:
			r.class = classOtherNet
		}
		rs = append(rs, r)
	}
	slices.SortStableFunc(rs, func(x, y ranked) int {
		if x.class != y.class {
			return x.class - y.class
		}
		return x.sub - y.sub
	})
	out := make([]netip.AddrPort, len(rs))
	for i, r := range rs {
		out[i] = r.ap
	}
	return out
}

func preferredIndex(preferred []netip.Prefix, a netip.Addr) int {
	for i, p := range preferred {
		if p = unmapPrefix(p); p.IsValid() && p.Contains(a) {
			return i
		}
	}
	return -1
}

var sharedSpace = netip.MustParsePrefix("100.64.0.0/10")

// isPrivate reports whether a is an address that is not routed on the
// internet: it names a machine only within some network.
func isPrivate(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() || sharedSpace.Contains(a)
}

func unmapPrefix(p netip.Prefix) netip.Prefix {
	if !p.IsValid() || !p.Addr().Is4In6() {
		return p
	}
	bits := p.Bits() - 96
	if bits < 0 {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(p.Addr().Unmap(), bits)
}

// LocalPrefixes returns the addresses of this host's up interfaces with
// their network prefixes (e.g. 10.1.0.11/24), loopback included. It reads
// the interfaces of the network namespace of the calling thread.
//
// Point-to-point and tunnel devices are left out (tunnelDevice): the
// addresses of a VPN's device (WireGuard's, a TUN device's, the node's
// own virtual network device) are no network of this host's to be
// reached on directly, and a "direct" connection to one would run
// inside that VPN (in bench/vip.sh, through wireguard-go).
func LocalPrefixes() ([]netip.Prefix, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("direct: list interfaces: %w", err)
	}
	types := linkTypes() // nil when unknown: the flags decide alone
	var out []netip.Prefix
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || tunnelDevice(ifc.Flags, types[ifc.Index]) {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("direct: addresses of %s: %w", ifc.Name, err)
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ones, bits := ipn.Mask.Size()
			if ip.Is4In6() && bits == 128 {
				ones -= 96
			}
			ip = ip.Unmap()
			if p, err := ip.Prefix(ones); err == nil {
				out = append(out, netip.PrefixFrom(ip, p.Bits()))
			}
		}
	}
	return out, nil
}

// localOrNil reads the local prefixes, or returns nil if it cannot.
func localOrNil() []netip.Prefix {
	p, _ := LocalPrefixes()
	return p
}

// machineAddrs picks the addresses a listener advertises from the local
// prefixes: all IPv4 addresses that are neither loopback nor link-local,
// or the loopback ones if there is nothing else.
func machineAddrs(local []netip.Prefix, port uint16) []netip.AddrPort {
	var addrs, loop []netip.AddrPort
	seen := map[netip.Addr]bool{}
	for _, p := range local {
		a := p.Addr().Unmap()
		if !a.Is4() || seen[a] || a.IsUnspecified() || a.IsMulticast() {
			continue
		}
		seen[a] = true
		switch {
		case a.IsLoopback():
			loop = append(loop, netip.AddrPortFrom(a, port))
		case a.IsLinkLocalUnicast():
		default:
			addrs = append(addrs, netip.AddrPortFrom(a, port))
		}
	}
	if len(addrs) == 0 {
		return loop
	}
	return addrs
}
