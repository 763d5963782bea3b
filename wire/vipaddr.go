package wire

import (
	"fmt"
	"net/netip"

	"github.com/gridlink/gridlink/identity"
)

// Messages of the directory of virtual addresses (issue 19): a node
// claims its virtual addresses (one IPv4, one IPv6) from its hub, the
// hubs keep them unique across the overlay as they keep names (KClaim,
// names.go: the same rule, the same Holding), and answer lookups by
// virtual address.
//
//	node → hub, on its link, never routed:
//	  KVirtual      {"query":Q,"v4":"100.96.0.5","v6":"fd67:726c::5"}
//	hub → node, on its link, never routed:
//	  KVirtualAck   {"query":Q,"v4":…,"v6":…,"taken":[{"addr":…,"holder":{…},"reason":"…"}]}
//	                (query 0: an address the node held, lost when two hubs met)
//	node → hub, or routed hub → hub:
//	  KLookupAddr   {"query":Q,"addr":"100.96.0.5"}, answered by KFound
//	routed hub → hub only (a node's is dropped):
//	  KAddrClaim    {"query":Q,"addr":…,"holding":{…}}
//	  KAddrClaimed  {"query":Q,"addr":…,"holders":[{…}]}
//
// A claim replaces the node's addresses: afterwards it holds those of the
// claimed ones that no other node holds, and no other (a zero address
// releases that family). Hubs of Version VersionVirtual or later know
// these kinds; a node sends them only to such a hub (its hello's
// Version). Every hub of an overlay whose nodes claim virtual addresses
// must know them: an older hub closes a trunk over a kind it cannot
// decode.
const (
	// KVirtual is a node's claim of its virtual addresses (Virtual).
	KVirtual = "virtual"
	// KVirtualAck is the hub's verdict on a KVirtual (VirtualAck).
	KVirtualAck = "virtual-ack"
	// KLookupAddr asks which node holds a virtual address (LookupAddr);
	// the answer is a KFound with at most one match.
	KLookupAddr = "lookup-addr"
	// KAddrClaim asks a hub which of its nodes hold AddrClaim.Addr: the
	// sender is about to give it to AddrClaim.Holding.Node.
	KAddrClaim = "addr-claim"
	// KAddrClaimed answers KAddrClaim (AddrClaimed).
	KAddrClaimed = "addr-claimed"
)

// The default prefixes of the virtual network (package vip derives
// addresses in them; a hub admits claims in them unless configured with
// the grid's own). DefaultVirtual4 lies inside the shared address space
// 100.64.0.0/10 (RFC 6598), which sites rarely use inside;
// DefaultVirtual6 is a ULA (RFC 4193) whose bytes after fd spell "grl"
// (0x67 0x72 0x6c).
var (
	DefaultVirtual4 = netip.MustParsePrefix("100.96.0.0/12")
	DefaultVirtual6 = netip.MustParsePrefix("fd67:726c::/32")
)

// VersionVirtual is the first protocol version (Hello.Version) whose hubs
// keep virtual addresses.
const VersionVirtual = 2

// A lookup by name (KLookup) is answered with the node's virtual
// addresses too: hubs of VersionVirtual fill identity.Machine.Virtual in
// KFound's matches, exactly the addresses the directory by address gives
// that node:
//
//	KFound        {"query":Q,"matches":[{"id":…,"name":"n1",…,"virtual":["100.96.0.5","fd67:726c::5"]}]}
//
// Decoders are strict (unknown fields refused), so a hub never sends the
// field to a peer of an older Version: it strips it from what it sends
// such a node or neighbour hub (it is empty anyway in an overlay without
// virtual addresses, and the field is omitted when empty).

// maxTaken bounds the refusals one KVirtualAck lists (one per family).
const maxTaken = 2

// Virtual is the body of KVirtual. V4 is an IPv4 address, V6 an IPv6
// one (not IPv4-mapped); either may be zero (none).
type Virtual struct {
	Query uint64     `json:"query"`
	V4    netip.Addr `json:"v4,omitzero"`
	V6    netip.Addr `json:"v6,omitzero"`
}

// VirtualAck is the body of KVirtualAck: the addresses the node holds now
// and those refused, each with its holder.
type VirtualAck struct {
	Query uint64      `json:"query"`
	V4    netip.Addr  `json:"v4,omitzero"`
	V6    netip.Addr  `json:"v6,omitzero"`
	Taken []AddrTaken `json:"taken,omitempty"`
}

// AddrTaken is one virtual address refused to a node: held by another
// node (Code empty, Holder that node) or, Code AddrOutside, not in the
// grid's virtual prefixes (Holder zero). A node older than Code reads a
// KVirtualAck that sets it as a malformed message (strict decoding): it
// was sent only for a claim no hub of the grid admits.
type AddrTaken struct {
	Addr   netip.Addr       `json:"addr"`
	Holder identity.Machine `json:"holder"`         // with Hub and HubName
	Reason string           `json:"reason"`         // in words, as the refusing hub logs it
	Code   string           `json:"code,omitempty"` // "" or AddrOutside
}

// AddrOutside (AddrTaken.Code): the address lies outside the virtual
// prefixes the refusing hub admits (hubserver.Config.VirtualPrefixes):
// an underlay address, say, that NAME.grid would otherwise resolve to.
const AddrOutside = "outside"

// LookupAddr is the body of KLookupAddr.
type LookupAddr struct {
	Query uint64     `json:"query"`
	Addr  netip.Addr `json:"addr"`
}

// AddrClaim is the body of KAddrClaim.
type AddrClaim struct {
	Query   uint64     `json:"query"`
	Addr    netip.Addr `json:"addr"`
	Holding Holding    `json:"holding"` // the node about to hold Addr
}

// AddrClaimed is the body of KAddrClaimed: the answering hub's holders of
// Addr (Query 0: an answer to a claim sent when hubs met).
type AddrClaimed struct {
	Query   uint64     `json:"query"`
	Addr    netip.Addr `json:"addr"`
	Holders []Holding  `json:"holders,omitempty"`
}

// CheckVirtualAddr says why a may not be a node's virtual address: it
// must be a unicast address without a zone, not unspecified, loopback,
// link-local, multicast or the IPv4 broadcast address, and an IPv6
// address must not be IPv4-mapped.
func CheckVirtualAddr(a netip.Addr) error {
	switch {
	case !a.IsValid():
		return fmt.Errorf("no address")
	case a.Zone() != "":
		return fmt.Errorf("virtual address %s has a zone", a)
	case a.Is4In6():
		return fmt.Errorf("virtual address %s is IPv4-mapped", a)
	case a.IsUnspecified(), a.IsLoopback(), a.IsMulticast(), a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast(),
		a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("%s cannot be a virtual address (not a unicast address a node may hold)", a)
	}
	return nil
}

// CheckVirtual checks a node's claim: V4 an IPv4 address, V6 an IPv6 one,
// each zero or a possible virtual address.
func CheckVirtual(v4, v6 netip.Addr) error {
	if v4.IsValid() {
		if !v4.Is4() {
			return fmt.Errorf("v4 %s is not an IPv4 address", v4)
		}
		if err := CheckVirtualAddr(v4); err != nil {
			return err
		}
	}
	if v6.IsValid() {
		if !v6.Is6() || v6.Is4In6() {
			return fmt.Errorf("v6 %s is not an IPv6 address", v6)
		}
		if err := CheckVirtualAddr(v6); err != nil {
			return err
		}
	}
	return nil
}

// checkMachineVirtual checks a machine's virtual addresses: at most one
// IPv4 and one IPv6 address, each a possible virtual address.
func checkMachineVirtual(m *identity.Machine) error {
	if len(m.Virtual) == 0 {
		return nil
	}
	if len(m.Virtual) > 2 {
		return fmt.Errorf("machine %s lists %d virtual addresses, more than 2", m.ID.Short(), len(m.Virtual))
	}
	var v4, v6 netip.Addr
	for _, a := range m.Virtual {
		switch {
		case a.Is4() && !v4.IsValid():
			v4 = a
		case a.Is6() && !a.Is4In6() && !v6.IsValid():
			v6 = a
		default:
			return fmt.Errorf("machine %s: virtual addresses %v: want at most one IPv4 and one IPv6 address", m.ID.Short(), m.Virtual)
		}
	}
	return CheckVirtual(v4, v6)
}

// StripVirtual returns m as a peer of protocol version v may decode it:
// for v before VersionVirtual, a copy of m without the machines' virtual
// addresses in a KFound (routed or not); otherwise m itself.
func StripVirtual(m *Message, v int) *Message {
	if v >= VersionVirtual || m == nil {
		return m
	}
	switch {
	case m.Kind == KFound && m.Found != nil && hasVirtual(m.Found.Matches):
		f := *m.Found
		f.Matches = make([]identity.Machine, len(m.Found.Matches))
		for i, mm := range m.Found.Matches {
			mm.Virtual = nil
			f.Matches[i] = mm
		}
		c := *m
		c.Found = &f
		return &c
	case m.Kind == KRouted && m.Routed != nil && m.Routed.Msg != nil:
		inner := StripVirtual(m.Routed.Msg, v)
		if inner == m.Routed.Msg {
			return m
		}
		r := *m.Routed
		r.Msg = inner
		c := *m
		c.Routed = &r
		return &c
	}
	return m
}

func hasVirtual(ms []identity.Machine) bool {
	for i := range ms {
		if len(ms[i].Virtual) > 0 {
			return true
		}
	}
	return false
}

// virtualBodies counts the bodies of this file's kinds set in m.
func (m *Message) virtualBodies() int {
	n := 0
	for _, p := range []bool{m.Virtual != nil, m.VirtualAck != nil, m.LookupAddr != nil, m.AddrClaim != nil, m.AddrClaimed != nil} {
		if p {
			n++
		}
	}
	return n
}

// isVirtualKind reports whether kind is one of this file's.
func isVirtualKind(kind string) bool {
	switch kind {
	case KVirtual, KVirtualAck, KLookupAddr, KAddrClaim, KAddrClaimed:
		return true
	}
	return false
}

// checkVirtual checks a message of this file's kinds (depth > 0: routed).
func (m *Message) checkVirtual(depth int) error {
	switch m.Kind {
	case KVirtual:
		if depth > 0 {
			return fmt.Errorf("cannot route a %s message", m.Kind)
		}
		if m.Virtual == nil {
			break
		}
		return CheckVirtual(m.Virtual.V4, m.Virtual.V6)
	case KVirtualAck:
		if depth > 0 {
			return fmt.Errorf("cannot route a %s message", m.Kind)
		}
		a := m.VirtualAck
		if a == nil {
			break
		}
		if err := CheckVirtual(a.V4, a.V6); err != nil {
			return err
		}
		if len(a.Taken) > maxTaken {
			return fmt.Errorf("%d addresses taken, more than %d", len(a.Taken), maxTaken)
		}
		for i := range a.Taken {
			t := &a.Taken[i]
			if err := CheckVirtualAddr(t.Addr); err != nil {
				return err
			}
			if t.Reason == "" || len(t.Reason) > 1024 {
				return fmt.Errorf("refusal reason of %d bytes, want 1 to 1024", len(t.Reason))
			}
			switch t.Code {
			case "":
				if err := checkMachine(&t.Holder); err != nil {
					return err
				}
			case AddrOutside:
				if !t.Holder.ID.IsZero() {
					return fmt.Errorf("an address outside the prefixes with a holder")
				}
			default:
				return fmt.Errorf("unknown address refusal code %q", t.Code)
			}
		}
		return nil
	case KLookupAddr:
		if m.LookupAddr == nil {
			break
		}
		return CheckVirtualAddr(m.LookupAddr.Addr)
	case KAddrClaim:
		if m.AddrClaim == nil {
			break
		}
		if err := CheckVirtualAddr(m.AddrClaim.Addr); err != nil {
			return err
		}
		return m.AddrClaim.Holding.check()
	case KAddrClaimed:
		c := m.AddrClaimed
		if c == nil {
			break
		}
		if err := CheckVirtualAddr(c.Addr); err != nil {
			return err
		}
		return (&Claimed{Holders: c.Holders}).check()
	}
	return fmt.Errorf("missing or malformed body")
}
