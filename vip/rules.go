package vip

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki/ca"
)

// Rules are a node's access rules: who may reach which ports of this
// node over the virtual network. The receiving node enforces its own
// rules on every packet a peer sends it; the zero Rules allow every
// member everything. Non-zero Rules allow what an entry allows and deny
// the rest, except what answers this node's own traffic (replies of the
// TCP and UDP flows and the pings it sent, tracked for flowTTL) and the
// ICMP errors about its own packets.
//
// The text form (ParseRules, String, and flags and config files through
// Set, MarshalText and UnmarshalText) is entries separated by newlines or
// semicolons, '#' starting a comment to the end of its line:
//
//	allow WHO WHAT...
//
// WHO is one of
//
//   - every member (and, in an open grid, every node)
//     group:NAME      a peer whose certificate chain carries the group NAME
//     user:NAME       a peer whose chain proves the user NAME (role user)
//     node:NAME       a peer whose chain proves the node NAME (role node),
//     or whose identity starts with NAME (at least 10
//     characters of it, as Short prints it)
//
// and each WHAT one of
//
//	any             every protocol and port
//	icmp            ICMP and ICMPv6 messages other than errors (pings);
//	                errors pass when they are about a packet this node
//	                sent to their sender, and only then
//	tcp, udp        every port of the protocol
//	tcp/PORTS       the ports listed, PORTS a comma-separated list of
//	udp/PORTS       ports and ranges LOW-HIGH
//
// e.g. "allow group:physics tcp/22,5000-6000; allow * udp/53 icmp". In an
// open grid a peer proves no chain, and only node: (by identity) and *
// entries match it. A fragment other than the first (which carries no
// port) passes when an entry allows its protocol at some port to the
// peer: alone it reaches no program, since the kernel reassembles it with
// a first fragment, which the rules checked (and which must show its
// whole transport header, unnested: fragment.go).
type Rules struct {
	entries []rule
}

type whoKind int

const (
	whoAny whoKind = iota
	whoGroup
	whoUser
	whoNode
)

// minIDPrefix is the shortest identity prefix a node: entry matches.
const minIDPrefix = 10

type rule struct {
	who  whoKind
	name string
	what []service
}

// service is one WHAT: a protocol (0: any) and a port range.
type service struct {
	proto  uint8 // protoTCP, protoUDP, protoICMPv4 (both ICMPs), 0 any
	lo, hi uint16
}

// ErrBadRule matches every RuleError.
var ErrBadRule = errors.New("vip: bad access rule")

// RuleError is ParseRules' refusal of an entry: which one (counted from
// 1, as written), its text and what was wrong.
type RuleError struct {
	Entry   int
	Text    string
	Problem string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("vip: access rule %d %q: %s", e.Entry, e.Text, e.Problem)
}

func (e *RuleError) Unwrap() error { return ErrBadRule }

// ParseRules reads rules in the text form (see Rules). Empty text (or
// only comments) is the zero Rules.
func ParseRules(text string) (Rules, error) {
	var r Rules
	return r, r.add(text)
}

// IsZero reports whether r has no entries: every member may reach
// everything.
func (r Rules) IsZero() bool { return len(r.entries) == 0 }

// Set adds the entries of text to r (a flag given several times adds
// them all).
func (r *Rules) Set(text string) error { return r.add(text) }

// UnmarshalText sets r to the rules in text.
func (r *Rules) UnmarshalText(text []byte) error {
	var n Rules
	if err := n.add(string(text)); err != nil {
		return err
	}
	*r = n
	return nil
}

// MarshalText is String's text.
func (r Rules) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// String is the rules in the text form, one entry a line.
func (r Rules) String() string {
	lines := make([]string, len(r.entries))
	for i, e := range r.entries {
		lines[i] = e.String()
	}
	return strings.Join(lines, "\n")
}

func (e rule) String() string {
	var b strings.Builder
	b.WriteString("allow ")
	switch e.who {
	case whoAny:
		b.WriteString("*")
	case whoGroup:
		b.WriteString("group:" + e.name)
	case whoUser:
		b.WriteString("user:" + e.name)
	case whoNode:
		b.WriteString("node:" + e.name)
	}
	for i := 0; i < len(e.what); {
		s := e.what[i]
		b.WriteString(" ")
		switch s.proto {
		case 0:
			b.WriteString("any")
			i++
			continue
		case protoICMPv4:
			b.WriteString("icmp")
			i++
			continue
		case protoTCP:
			b.WriteString("tcp")
		case protoUDP:
			b.WriteString("udp")
		}
		if s.lo == 0 && s.hi == 0xffff {
			i++
			continue
		}
		b.WriteString("/")
		for j, start := i, i; j < len(e.what) && e.what[j].proto == s.proto; j++ {
			if j > start {
				b.WriteString(",")
			}
			if p := e.what[j]; p.lo == p.hi {
				b.WriteString(strconv.Itoa(int(p.lo)))
			} else {
				b.WriteString(strconv.Itoa(int(p.lo)) + "-" + strconv.Itoa(int(p.hi)))
			}
			i = j + 1
		}
	}
	return b.String()
}

func (r *Rules) add(text string) error {
	n := 0
	for line := range strings.SplitSeq(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		for entry := range strings.SplitSeq(line, ";") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			n++
			e, problem := parseRule(strings.Fields(entry))
			if problem != "" {
				return &RuleError{Entry: n, Text: entry, Problem: problem}
			}
			r.entries = append(r.entries, e)
		}
	}
	return nil
}

func parseRule(f []string) (rule, string) {
	var e rule
	if f[0] != "allow" {
		return e, fmt.Sprintf("starts with %q, want allow", f[0])
	}
	if len(f) < 3 {
		return e, "want allow WHO WHAT..., e.g. allow group:physics tcp/22"
	}
	who := f[1]
	kind, name, ok := strings.Cut(who, ":")
	switch {
	case who == "*":
		e.who = whoAny
	case !ok:
		return e, fmt.Sprintf("who %q is none of *, group:NAME, user:NAME, node:NAME", who)
	case name == "":
		return e, fmt.Sprintf("who %q has an empty name", who)
	case kind == "group":
		e.who, e.name = whoGroup, name
	case kind == "user":
		e.who, e.name = whoUser, name
	case kind == "node":
		e.who, e.name = whoNode, name
	default:
		return e, fmt.Sprintf("who %q: kind %q is none of group, user, node", who, kind)
	}
	for _, w := range f[2:] {
		s, problem := parseWhat(w)
		if problem != "" {
			return e, problem
		}
		e.what = append(e.what, s...)
	}
	return e, ""
}

func parseWhat(w string) ([]service, string) {
	proto, ports, hasPorts := strings.Cut(w, "/")
	var p uint8
	switch proto {
	case "any", "icmp":
		if hasPorts {
			return nil, fmt.Sprintf("%q: %s takes no ports", w, proto)
		}
		if proto == "icmp" {
			p = protoICMPv4
		}
		return []service{{proto: p, lo: 0, hi: 0xffff}}, ""
	case "tcp":
		p = protoTCP
	case "udp":
		p = protoUDP
	default:
		return nil, fmt.Sprintf("%q: protocol %q is none of any, icmp, tcp, udp", w, proto)
	}
	if !hasPorts {
		return []service{{proto: p, lo: 0, hi: 0xffff}}, ""
	}
	var out []service
	for pr := range strings.SplitSeq(ports, ",") {
		los, his, isRange := strings.Cut(pr, "-")
		lo, err1 := strconv.ParseUint(los, 10, 16)
		hi, err2 := lo, error(nil)
		if isRange {
			hi, err2 = strconv.ParseUint(his, 10, 16)
		}
		switch {
		case err1 != nil || err2 != nil:
			return nil, fmt.Sprintf("%q: port %q is not a port (0-65535) or a range LOW-HIGH", w, pr)
		case hi < lo:
			return nil, fmt.Sprintf("%q: range %q ends below its start", w, pr)
		}
		out = append(out, service{proto: p, lo: uint16(lo), hi: uint16(hi)})
	}
	return out, ""
}

// matches reports whether the entry's WHO is the peer id with proof pr.
func (e rule) matches(id identity.ID, pr principal) bool {
	c := pr.chain
	switch e.who {
	case whoAny:
		return true
	case whoGroup:
		return c != nil && slices.Contains(c.Groups, e.name)
	case whoUser:
		return c != nil && c.Role == ca.User && c.Name == e.name
	case whoNode:
		if c != nil && c.Role == ca.Node && c.Name == e.name {
			return true
		}
		return len(e.name) >= minIDPrefix && strings.HasPrefix(id.String(), strings.ToLower(e.name))
	}
	return false
}

// allows reports whether the rules let the peer id (proof pr) send a
// packet of transport t to this node. The zero Rules allow all.
func (r Rules) allows(id identity.ID, pr principal, t transport) bool {
	if r.IsZero() {
		return true
	}
	if t.isICMPError() { // only about this node's own packets (admit)
		return false
	}
	proto := t.proto
	if t.icmp {
		proto = protoICMPv4
	}
	for _, e := range r.entries {
		if !e.matches(id, pr) {
			continue
		}
		for _, s := range e.what {
			switch {
			case s.proto == 0:
				return true
			case s.proto != proto:
			case !t.ports: // ICMP, or a later fragment: any port
				return true
			case s.lo <= t.dstPort && t.dstPort <= s.hi:
				return true
			}
		}
	}
	return false
}
