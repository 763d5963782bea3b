package topology

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"net/netip"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Error is a problem in a topology file, located by file, line and field.
type Error struct {
	File  string
	Line  int    // 0 when the problem is not on one line
	Field string // the directive or key=value field at fault, if any
	Msg   string
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", loc, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s", loc, e.Msg)
}

var (
	nameRE      = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)
	paramNameRE = regexp.MustCompile(`^[A-Za-z0-9_]+$`)
	paramRE     = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)\}|\$([A-Za-z0-9_]+)`)
)

// docRanges are the only "public" addresses the lab may use: documentation
// ranges. 192.0.2.0/24 is left out on purpose: machines of this kind use
// it for their real network.
var docRanges = []netip.Prefix{
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
}

// docRangesText names docRanges in messages.
const docRangesText = "198.51.100.0/24, 203.0.113.0/24"

// LabRanges are the public address ranges a lab may use (the parser
// refuses others), for guards that keep the root namespace out of them.
func LabRanges() []netip.Prefix { return append([]netip.Prefix(nil), docRanges...) }

func inDocRange(p netip.Prefix) bool {
	for _, r := range docRanges {
		if r.Bits() <= p.Bits() && r.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

type parser struct {
	t         *Topology
	file      string
	line      int
	overrides map[string]string
	used      map[string]bool
	site      *Site
	explicit  map[*Host]map[string]netip.Addr // NET=ADDR fields, resolved after the site is complete
}

func (p *parser) errf(field, format string, args ...any) error {
	return &Error{File: p.file, Line: p.line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Parse parses a topology. file names it in errors (and, without its
// extension, names the topology); overrides replace parameter defaults.
func Parse(file string, src []byte, overrides map[string]string) (*Topology, error) {
	name := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	p := &parser{
		t:         &Topology{Name: name, File: file, Params: map[string]string{}, Scale: 1},
		file:      file,
		overrides: overrides,
		used:      map[string]bool{},
		explicit:  map[*Host]map[string]netip.Addr{},
	}
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		p.line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		if err := p.directive(fields); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &Error{File: file, Line: p.line + 1, Msg: err.Error()}
	}
	p.line = 0
	if err := p.finishSite(); err != nil {
		return nil, err
	}
	for k := range overrides {
		if !p.used[k] {
			return nil, &Error{File: file, Msg: fmt.Sprintf("--set %s: topology %s has no parameter %q (it has: %s)", k, name, k, p.paramList())}
		}
	}
	return p.t, p.validate()
}

func (p *parser) paramList() string {
	var ks []string
	for k := range p.t.Params {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	if len(ks) == 0 {
		return "none"
	}
	return strings.Join(ks, ", ")
}

// expand replaces parameter references in a field.
func (p *parser) expand(f string) (string, error) {
	var err error
	out := paramRE.ReplaceAllStringFunc(f, func(m string) string {
		sub := paramRE.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		v, ok := p.t.Params[name]
		if !ok && err == nil {
			err = p.errf(f, "unknown parameter $%s (declare it with 'param %s VALUE' first)", name, name)
		}
		return v
	})
	return out, err
}

func (p *parser) directive(fields []string) error {
	dir := fields[0]
	if dir == "param" {
		if len(fields) != 3 {
			return p.errf("param", "want 'param NAME DEFAULT', got %d fields", len(fields)-1)
		}
		name, val := fields[1], fields[2]
		if !paramNameRE.MatchString(name) {
			return p.errf("param", "bad parameter name %q (letters, digits and _ only)", name)
		}
		if _, dup := p.t.Params[name]; dup {
			return p.errf("param", "parameter %q declared twice", name)
		}
		if v, ok := p.overrides[name]; ok {
			val = v
			p.used[name] = true
		}
		p.t.Params[name] = val
		return nil
	}
	for i := 1; i < len(fields); i++ {
		f, err := p.expand(fields[i])
		if err != nil {
			return err
		}
		fields[i] = f
	}
	args, opts, err := p.split(fields[1:])
	if err != nil {
		return err
	}
	switch dir {
	case "scale":
		if len(args) != 1 || len(opts) != 0 {
			return p.errf("scale", "want 'scale FACTOR'")
		}
		v, err := strconv.ParseFloat(args[0], 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return p.errf("scale", "bad factor %q: want a number ≥ 0", args[0])
		}
		p.t.Scale = v
		return nil
	case "site":
		return p.siteDirective(args, opts)
	case "net":
		return p.netDirective(args)
	case "host":
		return p.hostDirective(args, opts)
	case "forward":
		return p.forwardDirective(args, opts)
	case "link":
		return p.linkDirective(args, opts)
	}
	return p.errf(dir, "unknown directive (want param, scale, site, net, host, forward or link)")
}

type opt struct{ key, val string }

// split separates positional fields from key=value fields.
func (p *parser) split(fields []string) (args []string, opts []opt, err error) {
	seen := map[string]bool{}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			if len(opts) > 0 {
				return nil, nil, p.errf(f, "positional field after key=value fields")
			}
			args = append(args, f)
			continue
		}
		if k == "" {
			return nil, nil, p.errf(f, "missing key before '='")
		}
		if seen[k] {
			return nil, nil, p.errf(k, "given twice")
		}
		seen[k] = true
		opts = append(opts, opt{k, v})
	}
	return args, opts, nil
}

func (p *parser) checkName(field, kind, name string) error {
	if !nameRE.MatchString(name) {
		return p.errf(field, "bad %s name %q: want a lower-case letter then up to 11 letters or digits", kind, name)
	}
	return nil
}

func (p *parser) siteDirective(args []string, opts []opt) error {
	if err := p.finishSite(); err != nil {
		return err
	}
	if len(args) != 1 {
		return p.errf("site", "want 'site NAME [key=value...]'")
	}
	if err := p.checkName("site", "site", args[0]); err != nil {
		return err
	}
	if p.t.Site(args[0]) != nil {
		return p.errf("site", "site %q defined twice", args[0])
	}
	s := &Site{Name: args[0], Line: p.line, Firewall: FirewallNone, NAT: NATNone}
	for _, o := range opts {
		switch o.key {
		case "wan":
			var err error
			s.WAN, err = netip.ParseAddr(o.val)
			if err != nil || !s.WAN.Is4() {
				return p.errf("wan", "bad address %q: want an IPv4 address", o.val)
			}
			if !inDocRange(netip.PrefixFrom(s.WAN, 32)) {
				return p.errf("wan", "%s is not in the documentation ranges (%s) the lab internet uses", s.WAN, docRangesText)
			}
		case "firewall":
			if o.val != FirewallNone && o.val != FirewallStateful {
				return p.errf("firewall", "unknown kind %q (want none or stateful)", o.val)
			}
			s.Firewall = o.val
		case "in", "out":
			rs, err := p.ports(o.key, o.val)
			if err != nil {
				return err
			}
			if o.key == "in" {
				s.In = rs
			} else {
				s.Out = rs
			}
		case "inbound":
			if o.val != "drop" && o.val != "reject" {
				return p.errf("inbound", "unknown action %q (want drop or reject)", o.val)
			}
			s.Reject = o.val == "reject"
		case "nat":
			switch o.val {
			case NATNone, NATPreserve, NATRandom, NATSequential:
				s.NAT = o.val
			default:
				return p.errf("nat", "unknown behaviour %q (want none, preserve, random or sequential)", o.val)
			}
		case "igd":
			switch o.val {
			case "on", "off":
				s.IGD = o.val == "on"
			default:
				return p.errf("igd", "unknown value %q (want on or off)", o.val)
			}
		default:
			return p.errf(o.key, "unknown site field (want wan, firewall, in, out, inbound, nat or igd)")
		}
	}
	if (len(s.In) > 0 || len(s.Out) > 0 || s.Reject) && s.Firewall != FirewallStateful && s.NAT == NATNone {
		return p.errf("firewall", "in=, out= and inbound= need firewall=stateful or a NAT")
	}
	if s.IGD && s.NAT == NATNone {
		return p.errf("igd", "igd=on needs a NAT to map ports on (add nat=preserve, random or sequential to the site)")
	}
	p.t.Sites = append(p.t.Sites, s)
	p.site = s
	return nil
}

func (p *parser) ports(field, val string) ([]PortRange, error) {
	var rs []PortRange
	for _, part := range strings.Split(val, ",") {
		proto, nums, ok := strings.Cut(part, "/")
		if !ok || (proto != "tcp" && proto != "udp") {
			return nil, p.errf(field, "bad port %q: want tcp/PORT, udp/PORT or tcp/LO-HI", part)
		}
		lo, hi, isRange := strings.Cut(nums, "-")
		if !isRange {
			hi = lo
		}
		l, err1 := strconv.ParseUint(lo, 10, 16)
		h, err2 := strconv.ParseUint(hi, 10, 16)
		if err1 != nil || err2 != nil || l == 0 || h < l {
			return nil, p.errf(field, "bad port %q: want ports 1-65535, low before high", part)
		}
		rs = append(rs, PortRange{Proto: proto, Lo: uint16(l), Hi: uint16(h)})
	}
	return rs, nil
}

func (p *parser) needSite(dir string) error {
	if p.site == nil {
		return p.errf(dir, "%s outside a site: put it after a 'site NAME' line", dir)
	}
	return nil
}
