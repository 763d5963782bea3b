package lab

import (
	"fmt"
	"strings"

	"github.com/gridlink/gridlink/internal/lab/topology"
)

// Ruleset returns the nftables ruleset of a site's gateway, or nil for an
// open site. The rules, in words:
//
//   - firewall=stateful: packets of known connections pass; new connections
//     from the internet are dropped (or rejected, inbound=reject) unless to a
//     port in in=; new connections out pass, or only to ports in out=.
//   - nat=...: sources on the site's nat nets are translated to the WAN
//     address: preserve uses masquerade (keeps the port when free), random
//     masquerade fully-random, sequential SNAT with a port taken from a
//     counter that grows by one per new mapping (SeqBase on, SeqPorts of them). New connections from the
//     internet find no mapping and are dropped unless a forward line maps
//     them to a host. The gateway itself answers only pings from outside.
func Ruleset(s *topology.Site) []string {
	if s.Firewall == topology.FirewallNone && s.NAT == topology.NATNone {
		return nil
	}
	wan := fmt.Sprintf("iifname %q", WANDev)
	out := fmt.Sprintf("oifname %q", WANDev)
	// deny lists the rules that refuse what came through match.
	deny := func(match string) []string {
		if !s.Reject {
			return []string{"    " + match + " drop"}
		}
		return []string{
			"    " + match + " meta l4proto tcp reject with tcp reset",
			"    " + match + " reject with icmpx type admin-prohibited",
		}
	}
	r := []string{
		"table inet gridlab {",
		"  chain input {",
		"    type filter hook input priority filter; policy accept;",
		"    ct state established,related accept",
		"    " + wan + " icmp type echo-request accept",
	}
	r = append(r, deny(wan)...)
	r = append(r, "  }",
		"  chain forward {",
		"    type filter hook forward priority filter; policy accept;",
		"    ct state established,related accept",
		"    ct state invalid drop",
		"    "+wan+" ct status dnat accept")
	for _, p := range s.In {
		r = append(r, fmt.Sprintf("    %s %s accept", wan, portMatch(p)))
	}
	r = append(r, deny(wan)...)
	if len(s.Out) > 0 {
		for _, p := range s.Out {
			r = append(r, fmt.Sprintf("    %s %s accept", out, portMatch(p)))
		}
		r = append(r, deny(out)...)
	}
	r = append(r, "  }", "}")
	if s.NAT == topology.NATNone {
		return r
	}
	var nets []string
	for _, n := range s.Nets {
		if n.Kind == topology.NetNAT {
			nets = append(nets, n.Prefix.String())
		}
	}
	src := fmt.Sprintf("%s ip saddr { %s }", out, strings.Join(nets, ", "))
	r = append(r,
		"table ip gridlab-nat {",
		"  chain prerouting {",
		"    type nat hook prerouting priority dstnat; policy accept;")
	for _, f := range s.Forwards {
		r = append(r, fmt.Sprintf("    %s ip daddr %s %s dport %d dnat to %s:%d",
			wan, s.WAN, f.Proto, f.Port, f.Host.IfaceOn(f.HostNet).Addr, f.ToPort))
	}
	r = append(r, "  }",
		"  chain postrouting {",
		"    type nat hook postrouting priority srcnat; policy accept;")
	switch s.NAT {
	case topology.NATPreserve:
		r = append(r, fmt.Sprintf("    %s masquerade", src))
	case topology.NATRandom:
		r = append(r, fmt.Sprintf("    %s masquerade fully-random", src))
	case topology.NATSequential:
		r = append(r,
			fmt.Sprintf("    %s meta l4proto { tcp, udp } snat to %s : numgen inc mod %d map { %s }", src, s.WAN, SeqPorts, seqMap()),
			fmt.Sprintf("    %s masquerade", src))
	}
	return append(r, "  }", "}")
}

// Sequential NATs hand out ports SeqBase, SeqBase+1, ... wrapping after
// SeqPorts mappings.
const (
	SeqBase  = 20000
	SeqPorts = 1000
)

// seqMap maps the counter to ports. A typed map is needed: numgen's value
// is in host byte order, and fed straight to snat it would step by 256.
func seqMap() string {
	var b strings.Builder
	for i := 0; i < SeqPorts; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d : %d", i, SeqBase+i)
	}
	return b.String()
}

func portMatch(p topology.PortRange) string {
	if p.Lo == p.Hi {
		return fmt.Sprintf("%s dport %d", p.Proto, p.Lo)
	}
	return fmt.Sprintf("%s dport %d-%d", p.Proto, p.Lo, p.Hi)
}
