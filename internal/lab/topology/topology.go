// Package topology parses gridlab topology files: the sites, networks, hosts
// and wide-area links of an emulated grid. It owns the file format, its
// validation and the addressing plan derived from it; building the networks
// (package lab) and emulating links (package wan) are left to others.
//
// # Format
//
// A topology is a line-oriented text file. '#' starts a comment. Each line is
// a directive followed by fields; indentation is only for the reader. net,
// host and forward lines belong to the site above them.
//
//	param NAME DEFAULT        a parameter, overridable from the command line
//	                          (gridlab up T --set NAME=VALUE); $NAME or
//	                          ${NAME} in any later field is replaced by it
//	scale FACTOR              multiplies every link delay (default 1)
//	site NAME [wan=ADDR] [firewall=none|stateful] [in=PORTS] [out=PORTS]
//	          [inbound=drop|reject] [nat=none|preserve|random|sequential]
//	          [igd=on|off]
//	net NAME PREFIX [public|nat]
//	host NAME [nets=NET,...] [role=ROLE] [services=sshd] [NET=ADDR ...]
//	forward PROTO/PORT HOST[:PORT]
//	link SITE SITE [rtt=DUR|delay=DUR] [rate=RATE] [loss=LOSS] [queue=SIZE]
//
// A site is a place on the lab internet with one gateway (router) that holds
// its wide-area link. Its networks are public (routed from the internet:
// addresses from the documentation ranges 198.51.100.0/24 and
// 203.0.113.0/24; not 192.0.2.0/24, which real networks of machines like
// this one use), nat (private, reaching out through the site's NAT) or,
// with neither word, non-routed: its hosts reach each other and nothing else.
// The gateway takes the first address of every routed network; hosts take
// the tenth address on and upwards in order, unless NET=ADDR says otherwise.
// A host's default route goes through the gateway on its first routed
// network; a host on no routed network has no default route.
//
// firewall=stateful denies new inbound connections except to the ports in
// in= (PORTS is a list like tcp/22,udp/500,tcp/8000-8100) and allows all
// outbound ones, or only those to out=. inbound= chooses whether denied
// packets are dropped (the default, as most site firewalls do) or rejected.
// On a NAT site inbound=reject needs no firewall: the NAT answers a SYN that
// matches no mapping with a TCP reset (as a Linux router with only conntrack
// and masquerade does: the SYN is for the router, whose stack resets it).
// nat= chooses the NAT's port allocation: preserve keeps the source port when
// it can (endpoint-independent mapping), random picks a random port for every
// mapping, sequential takes the next port for every new mapping. Filtering is
// Linux conntrack's: only replies to a mapping's own remote endpoint pass
// (address- and port-dependent). forward opens PROTO/PORT on the site's WAN
// address and forwards it to HOST.
//
// igd=on (on a NAT site; off by default) runs an Internet Gateway Device on
// the site's gateway: miniupnpd, answering UPnP IGD (SSDP and SOAP) and
// NAT-PMP on the site's nat nets only, so that their hosts can ask the NAT
// for inbound port mappings to themselves (ports 1024 and up).
//
// A link joins two sites in both directions, each direction a separate pipe
// with the same delay (rtt= is twice the one-way delay=), rate limit
// (e.g. 400mbit, 1gbit, 0 for unlimited), random loss (0.001 or 0.1%) and
// queue limit (e.g. 1.5MB). "link * * ..." sets the default for pairs not
// listed; without it unlisted pairs have no delay and no limit.
package topology

import (
	"fmt"
	"net/netip"
	"time"
)

// Topology is a parsed topology file.
type Topology struct {
	Name   string            // file name without extension
	File   string            // file name used in error messages
	Params map[string]string // parameter values after overrides
	Scale  float64           // link delay multiplier
	Sites  []*Site
	Links  []*Link
	// Default is the link for site pairs not listed ("link * *"), or nil.
	Default *Link
}

// Firewall kinds.
const (
	FirewallNone     = "none"
	FirewallStateful = "stateful"
)

// NAT port allocation behaviours.
const (
	NATNone       = "none"
	NATPreserve   = "preserve"
	NATRandom     = "random"
	NATSequential = "sequential"
)

// Site is one place on the lab internet behind one gateway.
type Site struct {
	Name     string
	Line     int
	WAN      netip.Addr // the gateway's address on the lab internet
	Firewall string     // FirewallNone or FirewallStateful
	In, Out  []PortRange
	Reject   bool   // reject denied packets instead of dropping them
	NAT      string // NATNone, NATPreserve, NATRandom or NATSequential
	IGD      bool   // the gateway runs a UPnP IGD and NAT-PMP server (miniupnpd)
	Nets     []*Net
	Hosts    []*Host
	Forwards []*Forward
}

// Net kinds.
const (
	NetIsolated = "isolated" // reaches only hosts on the same net
	NetPublic   = "public"   // routed from the lab internet
	NetNAT      = "nat"      // routed out through the site NAT
)

// Net is a network (one broadcast domain) of a site.
type Net struct {
	Name    string
	Prefix  netip.Prefix
	Kind    string     // NetIsolated, NetPublic or NetNAT
	Gateway netip.Addr // the site gateway's address on a routed net, else invalid
}

// Routed reports whether the site gateway routes this net.
func (n *Net) Routed() bool { return n.Kind != NetIsolated }

// Host is a machine of a site.
type Host struct {
	Name     string
	Site     *Site
	Role     string // free-form: frontend, node, desktop... ("node" by default)
	Ifaces   []*Iface
	Services []string // daemons the lab runs on the host: "sshd"
	Line     int
}

// Runs reports whether the lab runs service on the host.
func (h *Host) Runs(service string) bool {
	for _, s := range h.Services {
		if s == service {
			return true
		}
	}
	return false
}

// Iface is a host's interface on one net.
type Iface struct {
	Net  *Net
	Addr netip.Addr
}

// ID is the host's lab-wide name, SITE-HOST.
func (h *Host) ID() string { return h.Site.Name + "-" + h.Name }

// DefaultRoute returns the gateway address the host routes through and the
// net it lies on, or ok=false for a non-routed host.
func (h *Host) DefaultRoute() (gw netip.Addr, net *Net, ok bool) {
	for _, ifc := range h.Ifaces {
		if ifc.Net.Routed() {
			return ifc.Net.Gateway, ifc.Net, true
		}
	}
	return netip.Addr{}, nil, false
}

// PrimaryAddr is the address others would use for this host: its address on
// a public net if it has one, else its first address.
func (h *Host) PrimaryAddr() netip.Addr {
	for _, ifc := range h.Ifaces {
		if ifc.Net.Kind == NetPublic {
			return ifc.Addr
		}
	}
	return h.Ifaces[0].Addr
}

// Forward is a port forward on a site's NAT gateway.
type Forward struct {
	Proto   string // tcp or udp
	Port    uint16 // on the WAN address
	Host    *Host
	ToPort  uint16
	HostNet *Net // the routed net through which the gateway reaches Host
}

// PortRange is PROTO/LO[-HI].
type PortRange struct {
	Proto  string
	Lo, Hi uint16
}

func (p PortRange) String() string {
	if p.Lo == p.Hi {
		return fmt.Sprintf("%s/%d", p.Proto, p.Lo)
	}
	return fmt.Sprintf("%s/%d-%d", p.Proto, p.Lo, p.Hi)
}

// Link is an emulated wide-area link between two sites.
type Link struct {
	A, B  string        // site names, "*" for the default link
	Delay time.Duration // one-way, after scaling
	Rate  int64         // bit/s, 0 = unlimited
	Loss  float64       // 0..1
	Queue int           // bytes, 0 = emulator default
	Line  int
}

// Site returns the named site or nil.
func (t *Topology) Site(name string) *Site {
	for _, s := range t.Sites {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Hosts returns every host, in file order.
func (t *Topology) Hosts() []*Host {
	var hs []*Host
	for _, s := range t.Sites {
		hs = append(hs, s.Hosts...)
	}
	return hs
}

// Host finds a host by its ID (SITE-HOST), or by its bare name when that is
// unique in the topology, or by a site name when that site has one host.
func (t *Topology) Host(name string) (*Host, error) {
	var found []*Host
	for _, h := range t.Hosts() {
		if h.ID() == name {
			return h, nil
		}
		if h.Name == name {
			found = append(found, h)
		}
	}
	if len(found) == 0 {
		if s := t.Site(name); s != nil && len(s.Hosts) == 1 {
			return s.Hosts[0], nil
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, fmt.Errorf("topology %s has no host %q (gridlab hosts lists them)", t.Name, name)
	default:
		return nil, fmt.Errorf("host name %q is ambiguous in topology %s: use SITE-HOST, e.g. %s", name, t.Name, found[0].ID())
	}
}

// LinkFor returns the link joining sites a and b, or the default, or nil.
func (t *Topology) LinkFor(a, b string) *Link {
	for _, l := range t.Links {
		if (l.A == a && l.B == b) || (l.A == b && l.B == a) {
			return l
		}
	}
	return t.Default
}

// WANPrefixes are the destination prefixes the lab internet routes to site s:
// its WAN address and its public nets.
func (s *Site) WANPrefixes() []netip.Prefix {
	ps := []netip.Prefix{netip.PrefixFrom(s.WAN, 32)}
	for _, n := range s.Nets {
		if n.Kind == NetPublic {
			ps = append(ps, n.Prefix)
		}
	}
	return ps
}

// MatrixHost is the host that represents the site in connectivity matrices:
// its first host with role "node", or else its first host.
func (s *Site) MatrixHost() *Host {
	for _, h := range s.Hosts {
		if h.Role == "node" {
			return h
		}
	}
	return s.Hosts[0]
}
