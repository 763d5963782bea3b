package topology

import (
	"net/netip"
	"strconv"
	"strings"
	"time"
)

var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
}

func inPrivateRange(p netip.Prefix) bool {
	for _, r := range privateRanges {
		if r.Bits() <= p.Bits() && r.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

func (p *parser) netDirective(args []string) error {
	if err := p.needSite("net"); err != nil {
		return err
	}
	if len(args) < 2 || len(args) > 3 {
		return p.errf("net", "want 'net NAME PREFIX [public|nat]'")
	}
	if err := p.checkName("net", "net", args[0]); err != nil {
		return err
	}
	if args[0] == "lo" || strings.HasPrefix(args[0], "wan") {
		return p.errf("net", "net name %q is reserved", args[0])
	}
	for _, n := range p.site.Nets {
		if n.Name == args[0] {
			return p.errf("net", "net %q defined twice in site %s", args[0], p.site.Name)
		}
	}
	pfx, err := netip.ParsePrefix(args[1])
	if err != nil || !pfx.Addr().Is4() || pfx.Bits() > 29 || pfx.Bits() < 8 {
		return p.errf("prefix", "bad prefix %q: want an IPv4 prefix from /8 to /29, e.g. 10.1.0.0/24", args[1])
	}
	if pfx != pfx.Masked() {
		return p.errf("prefix", "%s has host bits set (did you mean %s?)", pfx, pfx.Masked())
	}
	n := &Net{Name: args[0], Prefix: pfx, Kind: NetIsolated}
	if len(args) == 3 {
		switch args[2] {
		case NetPublic, NetNAT:
			n.Kind = args[2]
		default:
			return p.errf(args[2], "unknown net kind (want public, nat, or nothing for a non-routed net)")
		}
	}
	switch {
	case n.Kind == NetPublic && !inDocRange(pfx):
		return p.errf("prefix", "public net %s is not inside the documentation ranges (%s) the lab internet uses", pfx, docRangesText)
	case n.Kind != NetPublic && !inPrivateRange(pfx):
		return p.errf("prefix", "%s net %s is not inside a private range (10/8, 172.16/12, 192.168/16)", n.Kind, pfx)
	case n.Kind == NetNAT && p.site.NAT == NATNone:
		return p.errf("nat", "net %s is nat but site %s has no NAT (add nat=preserve, random or sequential to the site)", n.Name, p.site.Name)
	}
	if n.Routed() {
		n.Gateway = pfx.Addr().Next()
	}
	p.site.Nets = append(p.site.Nets, n)
	return nil
}

func (s *Site) net(name string) *Net {
	for _, n := range s.Nets {
		if n.Name == name {
			return n
		}
	}
	return nil
}

func (s *Site) netNames() string {
	var ns []string
	for _, n := range s.Nets {
		ns = append(ns, n.Name)
	}
	if len(ns) == 0 {
		return "none yet"
	}
	return strings.Join(ns, ", ")
}

func (p *parser) hostDirective(args []string, opts []opt) error {
	if err := p.needSite("host"); err != nil {
		return err
	}
	if len(args) != 1 {
		return p.errf("host", "want 'host NAME [nets=NET,...] [role=ROLE] [NET=ADDR...]'")
	}
	if err := p.checkName("host", "host", args[0]); err != nil {
		return err
	}
	if args[0] == "gw" {
		return p.errf("host", "host name gw is reserved for the site gateway")
	}
	s := p.site
	for _, h := range s.Hosts {
		if h.Name == args[0] {
			return p.errf("host", "host %q defined twice in site %s", args[0], s.Name)
		}
	}
	h := &Host{Name: args[0], Site: s, Role: "node", Line: p.line}
	explicit := map[string]netip.Addr{}
	for _, o := range opts {
		switch {
		case o.key == "role":
			if o.val == "" {
				return p.errf("role", "empty role")
			}
			h.Role = o.val
		case o.key == "services":
			for _, svc := range strings.Split(o.val, ",") {
				if svc != "sshd" {
					return p.errf("services", "unknown service %q (the lab runs: sshd)", svc)
				}
				h.Services = append(h.Services, svc)
			}
		case o.key == "nets":
			for _, name := range strings.Split(o.val, ",") {
				n := s.net(name)
				if n == nil {
					return p.errf("nets", "unknown net %q (site %s has: %s; declare nets before hosts)", name, s.Name, s.netNames())
				}
				for _, ifc := range h.Ifaces {
					if ifc.Net == n {
						return p.errf("nets", "net %q listed twice", name)
					}
				}
				h.Ifaces = append(h.Ifaces, &Iface{Net: n})
			}
		case s.net(o.key) != nil:
			a, err := netip.ParseAddr(o.val)
			if err != nil || !s.net(o.key).Prefix.Contains(a) {
				return p.errf(o.key, "bad address %q: want an address inside %s", o.val, s.net(o.key).Prefix)
			}
			explicit[o.key] = a
		default:
			return p.errf(o.key, "unknown host field (want nets, role, services, or a net name of site %s: %s)", s.Name, s.netNames())
		}
	}
	if len(h.Ifaces) == 0 {
		return p.errf("nets", "host %s has no nets: add nets=NET,...", h.Name)
	}
	for k := range explicit {
		if !h.onNet(k) {
			return p.errf(k, "address given for net %s, which is not in nets=", k)
		}
	}
	p.explicit[h] = explicit
	s.Hosts = append(s.Hosts, h)
	return nil
}

func (h *Host) onNet(name string) bool {
	for _, ifc := range h.Ifaces {
		if ifc.Net.Name == name {
			return true
		}
	}
	return false
}

func (p *parser) forwardDirective(args []string, opts []opt) error {
	if err := p.needSite("forward"); err != nil {
		return err
	}
	if len(args) != 2 || len(opts) != 0 {
		return p.errf("forward", "want 'forward PROTO/PORT HOST[:PORT]'")
	}
	if p.site.NAT == NATNone {
		return p.errf("forward", "site %s has no NAT: its public hosts are reached directly (open ports with in=)", p.site.Name)
	}
	rs, err := p.ports("forward", args[0])
	if err != nil {
		return err
	}
	if len(rs) != 1 || rs[0].Lo != rs[0].Hi {
		return p.errf("forward", "want one port, e.g. tcp/22")
	}
	hostName, portStr, hasPort := strings.Cut(args[1], ":")
	f := &Forward{Proto: rs[0].Proto, Port: rs[0].Lo, ToPort: rs[0].Lo}
	if hasPort {
		v, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil || v == 0 {
			return p.errf("forward", "bad port %q", portStr)
		}
		f.ToPort = uint16(v)
	}
	for _, h := range p.site.Hosts {
		if h.Name == hostName {
			f.Host = h
		}
	}
	if f.Host == nil {
		return p.errf("forward", "unknown host %q in site %s (declare hosts before forwards)", hostName, p.site.Name)
	}
	for _, ifc := range f.Host.Ifaces {
		if ifc.Net.Routed() && f.HostNet == nil {
			f.HostNet = ifc.Net
		}
	}
	if f.HostNet == nil {
		return p.errf("forward", "host %s is on no routed net, so the gateway cannot reach it", hostName)
	}
	p.site.Forwards = append(p.site.Forwards, f)
	return nil
}

func (p *parser) linkDirective(args []string, opts []opt) error {
	if len(args) != 2 {
		return p.errf("link", "want 'link SITE SITE [rtt=|delay=] [rate=] [loss=] [queue=]'")
	}
	l := &Link{A: args[0], B: args[1], Line: p.line}
	if (l.A == "*") != (l.B == "*") {
		return p.errf("link", "the default link is 'link * *'")
	}
	if l.A != "*" && l.A == l.B {
		return p.errf("link", "a link joins two different sites")
	}
	var haveDelay bool
	for _, o := range opts {
		switch o.key {
		case "rtt", "delay":
			if haveDelay {
				return p.errf(o.key, "give rtt= or delay=, not both")
			}
			haveDelay = true
			d, err := time.ParseDuration(o.val)
			if err != nil || d < 0 {
				return p.errf(o.key, "bad duration %q: want e.g. 20ms or 1.5ms", o.val)
			}
			if o.key == "rtt" {
				d /= 2
			}
			l.Delay = time.Duration(float64(d) * p.t.Scale)
		case "rate":
			r, err := ParseRate(o.val)
			if err != nil {
				return p.errf("rate", "%v", err)
			}
			l.Rate = r
		case "loss":
			v, err := ParseLoss(o.val)
			if err != nil {
				return p.errf("loss", "%v", err)
			}
			l.Loss = v
		case "queue":
			v, err := ParseSize(o.val)
			if err != nil {
				return p.errf("queue", "%v", err)
			}
			l.Queue = v
		default:
			return p.errf(o.key, "unknown link field (want rtt, delay, rate, loss or queue)")
		}
	}
	if l.A == "*" {
		if p.t.Default != nil {
			return p.errf("link", "default link 'link * *' given twice (first on line %d)", p.t.Default.Line)
		}
		p.t.Default = l
		return nil
	}
	for _, o := range p.t.Links {
		if (o.A == l.A && o.B == l.B) || (o.A == l.B && o.B == l.A) {
			return p.errf("link", "sites %s and %s are already linked on line %d", l.A, l.B, o.Line)
		}
	}
	p.t.Links = append(p.t.Links, l)
	return nil
}
