package agent

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/gridlink/gridlink/status"
)

// Exit policy: which destinations the exit service (exit.go) connects
// to. Public addresses: any port. Never, whatever the operator lists:
// the exit host's loopback, link-local, unspecified, multicast and
// broadcast addresses, and any address of any of its interfaces (read
// again for every exit, since addresses change), also in their
// IPv4-mapped and NAT64 (64:ff9b::/96) forms: a member must not reach
// what listens on the exit host's loopback (metrics, dashboards, a
// SOCKS server of root's) or its own addresses. Private ranges (RFC 1918,
// 100.64.0.0/10, fc00::/7) and the grid's virtual prefixes: only as
// ExitRules (--exit-allow) list them.

// ExitRule is one --exit-allow entry: private addresses the exit service
// may connect to, and on which ports. Its text form (ParseExitRule,
// String) is CIDR[:PORTS], e.g. 10.0.0.0/8, 192.168.1.5/32:22,
// fd00::/8:80,443 or 172.16.0.0/12:8000-9000.
type ExitRule struct {
	Prefix netip.Prefix // masked; IPv4 prefixes as IPv4
	Ports  []PortRange  // empty: every port
}

// PortRange is the ports Lo to Hi, both included.
type PortRange struct{ Lo, Hi uint16 }

// ErrBadExitRule matches every ExitRuleError.
var ErrBadExitRule = errors.New("agent: bad exit rule")

// ExitRuleError is ParseExitRule's refusal: the text and what is wrong.
type ExitRuleError struct {
	Text    string
	Problem string
}

func (e *ExitRuleError) Error() string { return fmt.Sprintf("exit rule %q: %s", e.Text, e.Problem) }

func (e *ExitRuleError) Unwrap() error { return ErrBadExitRule }

// ParseExitRule reads CIDR[:PORTS]: ADDR/BITS with no bits set past BITS,
// then optionally ':' and a comma-separated list of ports (1-65535) and
// ranges LOW-HIGH. A prefix inside what an exit always refuses
// (loopback, link-local, unspecified, multicast) is an error, and so is
// one that holds no private address (public addresses need no rule).
func ParseExitRule(s string) (ExitRule, error) {
	bad := func(format string, a ...any) (ExitRule, error) {
		return ExitRule{}, &ExitRuleError{Text: s, Problem: fmt.Sprintf(format, a...)}
	}
	slash := strings.LastIndexByte(s, '/')
	if slash < 0 {
		return bad("want CIDR[:PORTS], an address with its prefix length, e.g. 10.0.0.0/8, 192.168.1.5/32:22 or fd00::/8:80,443")
	}
	bits, ports, hasPorts := strings.Cut(s[slash+1:], ":")
	cidr := s[:slash+1] + bits
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return bad("%q is not a CIDR prefix ADDR/BITS", cidr)
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	if m := p.Masked(); m != p {
		return bad("%s has address bits set past /%d: did you mean %s?", cidr, p.Bits(), m)
	}
	for _, c := range alwaysRefused {
		if c.prefix.Bits() <= p.Bits() && c.prefix.Contains(p.Addr()) {
			return bad("%s is %s, which an exit refuses whatever --exit-allow lists", p, c.words)
		}
	}
	if !slices.ContainsFunc(privateRanges, p.Overlaps) {
		return bad("%s holds no private address: an exit reaches public addresses without --exit-allow", p)
	}
	r := ExitRule{Prefix: p}
	if !hasPorts {
		return r, nil
	}
	for item := range strings.SplitSeq(ports, ",") {
		los, his, isRange := strings.Cut(item, "-")
		lo, ok1 := parsePort(los)
		hi, ok2 := lo, true
		if isRange {
			hi, ok2 = parsePort(his)
		}
		switch {
		case !ok1 || !ok2:
			return bad("port %q is not a port 1-65535 or a range LOW-HIGH", item)
		case hi < lo:
			return bad("port range %q ends below its start", item)
		}
		r.Ports = append(r.Ports, PortRange{lo, hi})
	}
	return r, nil
}

// parsePort reads a port 1-65535 written plainly (no sign, no leading 0).
func parsePort(s string) (uint16, bool) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 || strconv.FormatUint(n, 10) != s {
		return 0, false
	}
	return uint16(n), true
}

// String is r's text form.
func (r ExitRule) String() string {
	if len(r.Ports) == 0 {
		return r.Prefix.String()
	}
	return r.Prefix.String() + ":" + portsString(r.Ports)
}

func portsString(ports []PortRange) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p.Lo))
		if p.Hi != p.Lo {
			s[i] += "-" + strconv.Itoa(int(p.Hi))
		}
	}
	return strings.Join(s, ",")
}

// allowsPort reports whether r lists port (every port when r lists none).
func (r ExitRule) allowsPort(port uint16) bool {
	return len(r.Ports) == 0 || slices.ContainsFunc(r.Ports, func(p PortRange) bool { return p.Lo <= port && port <= p.Hi })
}

// addrClass is a range of addresses an exit treats alike.
type addrClass struct {
	prefix netip.Prefix
	reason string // status.ExitRefused*
	words  string
}

func class(prefix, reason, words string) addrClass {
	return addrClass{netip.MustParsePrefix(prefix), reason, words}
}

// alwaysRefused are refused whatever --exit-allow lists.
var alwaysRefused = []addrClass{
	class("127.0.0.0/8", status.ExitRefusedLoopback, "loopback of the exit host"),
	class("::1/128", status.ExitRefusedLoopback, "loopback of the exit host"),
	class("169.254.0.0/16", status.ExitRefusedLinkLocal, "a link-local address"),
	class("fe80::/10", status.ExitRefusedLinkLocal, "a link-local address"),
	class("0.0.0.0/8", status.ExitRefusedUnspecified, "an unspecified address (the exit host itself)"),
	class("::/128", status.ExitRefusedUnspecified, "an unspecified address (the exit host itself)"),
	class("224.0.0.0/4", status.ExitRefusedMulticast, "a multicast address"),
	class("ff00::/8", status.ExitRefusedMulticast, "a multicast address"),
	class("255.255.255.255/32", status.ExitRefusedBroadcast, "a broadcast address"),
}

// privateRanges are refused unless an ExitRule lists them.
var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT, and the grid's default virtual prefix
	netip.MustParsePrefix("fc00::/7"),
}

// nat64 is the well-known NAT64 prefix: 64:ff9b::A.B.C.D reaches the IPv4
// address A.B.C.D through a NAT64 gateway.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// exitPolicy decides an exit service's destinations.
type exitPolicy struct {
	allow   []ExitRule
	virtual []netip.Prefix // the grid's virtual prefixes: private
}

// hostAddrs are the exit host's own addresses and its subnets'
// broadcast addresses, each with its interface's name.
type hostAddrs struct {
	own, broadcast map[netip.Addr]string
}

// readHostAddrs reads the addresses of every interface of this host now.
func readHostAddrs() (hostAddrs, error) {
	h := hostAddrs{own: map[netip.Addr]string{}, broadcast: map[netip.Addr]string{}}
	ifs, err := net.Interfaces()
	if err != nil {
		return h, err
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			return h, err
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(n.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			h.own[ip] = ifc.Name
			if ones, bits := n.Mask.Size(); ip.Is4() && bits == 32 && ones < 31 {
				b := ip.As4()
				for i := range b {
					b[i] |= ^n.Mask[len(n.Mask)-4+i]
				}
				h.broadcast[netip.AddrFrom4(b)] = ifc.Name
			}
		}
	}
	return h, nil
}

// exitRefusal is the policy's refusal of a destination: the counter's
// reason and the words both ends show.
type exitRefusal struct {
	reason string // status.ExitRefused*
	words  string
}

func (e *exitRefusal) Error() string { return e.words }

// check decides whether the exit may connect to to; nil: it may.
func (p *exitPolicy) check(to netip.AddrPort, host hostAddrs) *exitRefusal {
	a := to.Addr().WithZone("").Unmap()
	if nat64.Contains(a) {
		b := a.As16()
		v4 := netip.AddrFrom4([4]byte(b[12:]))
		if r := p.check(netip.AddrPortFrom(v4, to.Port()), host); r != nil {
			return &exitRefusal{r.reason, "the NAT64 form of " + v4.String() + ", " + r.words}
		}
		return nil
	}
	for _, c := range alwaysRefused {
		if c.prefix.Contains(a) {
			return &exitRefusal{c.reason, c.words}
		}
	}
	if ifc, ok := host.own[a]; ok {
		return &exitRefusal{status.ExitRefusedOwnAddress, "an address of the exit host (" + ifc + ")"}
	}
	if ifc, ok := host.broadcast[a]; ok {
		return &exitRefusal{status.ExitRefusedBroadcast, "the broadcast address of the exit host's network on " + ifc}
	}
	i := slices.IndexFunc(p.virtual, func(v netip.Prefix) bool { return v.Contains(a) })
	what := ""
	if i >= 0 {
		what = "an address of the grid's virtual network " + p.virtual[i].String()
	} else if i = slices.IndexFunc(privateRanges, func(v netip.Prefix) bool { return v.Contains(a) }); i >= 0 {
		what = "a private address (" + privateRanges[i].String() + ")"
	} else {
		return nil // public
	}
	var ports []string
	for _, r := range p.allow {
		if !r.Prefix.Contains(a) {
			continue
		}
		if r.allowsPort(to.Port()) {
			return nil
		}
		ports = append(ports, portsString(r.Ports))
	}
	if ports != nil {
		return &exitRefusal{status.ExitRefusedPort, fmt.Sprintf("%s on port %d, where the exit's --exit-allow lists only port %s", what, to.Port(), strings.Join(ports, ","))}
	}
	return &exitRefusal{status.ExitRefusedPrivate, what + " that the exit's --exit-allow does not list"}
}
