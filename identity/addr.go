package identity

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Machine is a machine identifier (SmartSockets §3.2.1): who a node is and
// every way it may be reached directly.
type Machine struct {
	ID        ID               `json:"id"`
	Name      string           `json:"name,omitempty"`       // human name, unique in the job (e.g. das3v-n1)
	Addrs     []netip.AddrPort `json:"addrs,omitempty"`      // its interface addresses with its direct listening port
	Observed  []netip.AddrPort `json:"observed,omitempty"`   // its address as hubs saw it (e.g. a NAT's)
	NAT       netip.Addr       `json:"nat,omitzero"`         // the external address of the NAT it found itself behind, by classifying hubs' observations (zero: none, or not classified)
	NonRouted bool             `json:"non_routed,omitempty"` // its routing table has no default route: it reaches only its own networks
	// NATSequential: its NAT was classified as taking each new mapping's
	// port from the one before; a splice to or from it first observes
	// that NAT's counter, a round trip more (peers' races wait for it).
	NATSequential bool   `json:"nat_sequential,omitempty"`
	Hub           ID     `json:"hub,omitzero"`       // the hub it is attached to
	HubName       string `json:"hub_name,omitempty"` // that hub's name (its site)
	// Virtual lists the virtual addresses (issue 19: at most one IPv4 and
	// one IPv6) the node holds in the hubs' directory. Only hubs fill it,
	// in their answers to lookups (wire.KFound), and only for peers of
	// wire.VersionVirtual or later; a hub ignores it in what a node says
	// of itself.
	Virtual []netip.Addr `json:"virtual,omitempty"`
}

func (m Machine) String() string {
	name := Printable(m.Name)
	if name == "" {
		name = m.ID.Short()
	}
	if m.HubName != "" {
		return name + "@" + Printable(m.HubName)
	}
	return name
}

// Addr is a virtual address: a node, a port on it and optionally its hub.
// Its text form is
//
//	NODE[:PORT][@HUB]
//
// where NODE is an ID (52 base32 characters), a node name (letters, digits,
// '-', '_' and '.') or an IP address ([v6] in brackets), PORT a number or a
// service name (a letter, then letters, digits and '-'), and HUB a hub's ID
// or name. Partial forms such as name:port are resolved through the hubs.
type Addr struct {
	Node    string
	Port    uint16 // 0 when Service names the port
	Service string
	Hub     string
}

var (
	nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}$`)
	serviceRE  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]{0,31}$`)
)

// ErrBadAddr is wrapped by every error of ParseAddr (an *AddrError).
var ErrBadAddr = errors.New("bad address")

// AddrError is text that is not a virtual address, and why.
type AddrError struct {
	Text string // the text, clipped
	Why  string
}

func (e *AddrError) Error() string {
	return fmt.Sprintf("identity: %v %q: %s (want NODE[:PORT][@HUB])", ErrBadAddr, e.Text, e.Why)
}

func (e *AddrError) Unwrap() error { return ErrBadAddr }

// ParseAddr parses the text form of a virtual address; its errors are
// *AddrError.
func ParseAddr(s string) (Addr, error) {
	var a Addr
	bad := func(why string) (Addr, error) {
		return Addr{}, &AddrError{Text: clip(s), Why: why}
	}
	rest := s
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		a.Hub = rest[i+1:]
		rest = rest[:i]
		if !nodeNameRE.MatchString(a.Hub) {
			return bad("bad hub " + strconv.Quote(a.Hub))
		}
	}
	node, port := rest, ""
	if strings.HasPrefix(rest, "[") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return bad("missing ']'")
		}
		node, port = rest[1:end], strings.TrimPrefix(rest[end+1:], ":")
		if _, err := netip.ParseAddr(node); err != nil {
			return bad("bad IP address in brackets")
		}
	} else if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		node, port = rest[:i], rest[i+1:]
	}
	if node == "" {
		return bad("no node")
	}
	if !nodeNameRE.MatchString(node) {
		if _, err := netip.ParseAddr(node); err != nil {
			return bad("bad node " + strconv.Quote(node))
		}
	}
	a.Node = node
	switch {
	case port == "":
	case port[0] >= '0' && port[0] <= '9':
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || p == 0 {
			return bad("port must be 1-65535")
		}
		a.Port = uint16(p)
	case serviceRE.MatchString(port):
		a.Service = port
	default:
		return bad("bad port or service " + strconv.Quote(port))
	}
	return a, nil
}

func (a Addr) String() string {
	node := a.Node
	if ip, err := netip.ParseAddr(node); err == nil && ip.Is6() {
		node = "[" + node + "]"
	}
	s := node
	switch {
	case a.Service != "":
		s += ":" + a.Service
	case a.Port != 0:
		s += ":" + strconv.Itoa(int(a.Port))
	}
	if a.Hub != "" {
		s += "@" + a.Hub
	}
	return s
}

// PortName is the port as text: the service name or the number.
func (a Addr) PortName() string {
	if a.Service != "" {
		return a.Service
	}
	return strconv.Itoa(int(a.Port))
}

// IsIP reports whether Node is an IP address rather than a name or ID.
func (a Addr) IsIP() bool {
	_, err := netip.ParseAddr(a.Node)
	return err == nil
}

// HostScoped reports whether a names a machine only as seen from its own
// host: loopback (127.0.0.0/8, ::1), link-local (whose meaning depends
// on the interface of one host) and unspecified addresses. A node's
// host-scoped addresses are of use only to peers on the same host; a
// peer elsewhere that dials one reaches itself or its own link.
func HostScoped(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified()
}

// WithoutHostScoped returns m without the host-scoped addresses among its
// Addrs and Observed, and whether it dropped any; m's slices are left as
// they are (the result has its own when it dropped some).
func (m Machine) WithoutHostScoped() (Machine, bool) {
	scoped := func(ap netip.AddrPort) bool { return HostScoped(ap.Addr()) }
	if !slices.ContainsFunc(m.Addrs, scoped) && !slices.ContainsFunc(m.Observed, scoped) {
		return m, false
	}
	m.Addrs = slices.DeleteFunc(slices.Clone(m.Addrs), scoped)
	m.Observed = slices.DeleteFunc(slices.Clone(m.Observed), scoped)
	return m, true
}
