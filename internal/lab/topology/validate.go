package topology

import (
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
)

// finishSite completes the site being parsed: addresses, WAN address, and
// the checks that need the whole site.
func (p *parser) finishSite() error {
	s := p.site
	if s == nil {
		return nil
	}
	p.site = nil
	fail := func(field, format string, args ...any) error {
		return &Error{File: p.file, Line: s.Line, Field: field, Msg: fmt.Sprintf("site %s: ", s.Name) + fmt.Sprintf(format, args...)}
	}
	if len(s.Hosts) == 0 {
		return fail("site", "has no hosts")
	}
	for _, n := range s.Nets {
		taken := map[netip.Addr]*Host{}
		if n.Routed() {
			taken[n.Gateway] = nil
		}
		// explicit addresses first, then the rest in order from .10 up.
		for _, h := range s.Hosts {
			if a, ok := p.explicit[h][n.Name]; ok {
				if prev, dup := taken[a]; dup {
					owner := "the gateway"
					if prev != nil {
						owner = "host " + prev.Name
					}
					return &Error{File: p.file, Line: h.Line, Field: n.Name, Msg: fmt.Sprintf("address %s is already %s's", a, owner)}
				}
				taken[a] = h
				h.IfaceOn(n).Addr = a
			}
		}
		next := n.Prefix.Addr()
		for i := 0; i < 10; i++ {
			next = next.Next()
		}
		for _, h := range s.Hosts {
			ifc := h.IfaceOn(n)
			if ifc == nil || ifc.Addr.IsValid() {
				continue
			}
			for _, dup := taken[next]; dup; _, dup = taken[next] {
				next = next.Next()
			}
			if !n.Prefix.Contains(next.Next()) { // keep the broadcast address free
				return &Error{File: p.file, Line: h.Line, Field: "nets", Msg: fmt.Sprintf("net %s (%s) has no address left for host %s", n.Name, n.Prefix, h.Name)}
			}
			ifc.Addr = next
			taken[next] = h
			next = next.Next()
		}
	}
	var hasNAT bool
	for _, n := range s.Nets {
		if n.Kind == NetNAT {
			hasNAT = true
		}
		if n.Kind == NetPublic && !s.WAN.IsValid() {
			s.WAN = n.Gateway
		}
	}
	if s.NAT != NATNone && !hasNAT {
		return fail("nat", "nat=%s but no net is marked nat", s.NAT)
	}
	if !s.WAN.IsValid() {
		return fail("wan", "has no public net, so give its gateway's address on the lab internet with wan=ADDR")
	}
	return nil
}

// IfaceOn returns the host's interface on net n, or nil.
func (h *Host) IfaceOn(n *Net) *Iface {
	for _, ifc := range h.Ifaces {
		if ifc.Net == n {
			return ifc
		}
	}
	return nil
}

// validate checks what involves several sites.
func (p *parser) validate() error {
	t := p.t
	if len(t.Sites) == 0 {
		return &Error{File: p.file, Msg: "no sites"}
	}
	type owner struct {
		site string
		pfx  netip.Prefix
	}
	var public []owner
	for _, s := range t.Sites {
		for _, pfx := range s.WANPrefixes() {
			for _, o := range public {
				if o.pfx.Overlaps(pfx) && o.site != s.Name {
					return &Error{File: p.file, Line: s.Line, Field: "site", Msg: fmt.Sprintf("site %s: public address space %s overlaps site %s's %s", s.Name, pfx, o.site, o.pfx)}
				}
			}
			public = append(public, owner{s.Name, pfx})
		}
	}
	for _, l := range t.Links {
		for _, name := range []string{l.A, l.B} {
			if t.Site(name) == nil {
				return &Error{File: p.file, Line: l.Line, Field: "link", Msg: fmt.Sprintf("unknown site %q", name)}
			}
		}
	}
	return nil
}

// ParseRate parses a link rate in bits per second: a number with an
// optional unit bit, kbit, mbit or gbit (any case), e.g. 400mbit. 0 means
// unlimited.
func ParseRate(s string) (int64, error) {
	num, mult := splitUnit(s, map[string]float64{"": 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9})
	v, err := strconv.ParseFloat(num, 64)
	if mult == 0 || err != nil || v < 0 || math.IsInf(v, 0) || v*mult > 1e12 {
		return 0, fmt.Errorf("bad rate %q: want e.g. 400mbit, 1gbit, 512kbit or 0 for unlimited", s)
	}
	return int64(v * mult), nil
}

// ParseLoss parses a loss probability: a fraction (0.001) or a percentage
// (0.1%), below 1.
func ParseLoss(s string) (float64, error) {
	num, pct := strings.CutSuffix(s, "%")
	v, err := strconv.ParseFloat(num, 64)
	if pct {
		v /= 100
	}
	if err != nil || v < 0 || v >= 1 || math.IsNaN(v) {
		return 0, fmt.Errorf("bad loss %q: want a fraction below 1 (0.001) or a percentage (0.1%%)", s)
	}
	return v, nil
}

// ParseSize parses a byte count: a number with an optional unit b, kb, mb
// (powers of 1000) or kib, mib (powers of 1024), any case.
func ParseSize(s string) (int, error) {
	num, mult := splitUnit(s, map[string]float64{"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "kib": 1 << 10, "mib": 1 << 20})
	v, err := strconv.ParseFloat(num, 64)
	if mult == 0 || err != nil || v < 0 || v*mult > 1<<30 {
		return 0, fmt.Errorf("bad size %q: want e.g. 1.5mb or 256kib (at most 1 GiB)", s)
	}
	return int(v * mult), nil
}

// splitUnit splits "400mbit" into "400" and the multiplier of "mbit", or
// returns multiplier 0 for an unknown unit.
func splitUnit(s string, units map[string]float64) (string, float64) {
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') && s[i-1] != '.' {
		i--
	}
	return s[:i], units[strings.ToLower(s[i:])]
}
