package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/gridlink/gridlink/identity"
)

// Control message kinds (Message.Kind).
const (
	// KHello is the first message each side sends on a new hub link.
	KHello = "hello"
	// KGossip carries a hub's distance-vector routing table to one
	// neighbour hub (see Gossip).
	KGossip = "gossip"
	// KRouted carries a message to a hub or node elsewhere in the overlay.
	KRouted = "routed"
	// KLookup asks a hub which of its nodes match a name or ID.
	KLookup = "lookup"
	// KFound answers KLookup.
	KFound = "found"
	// KReverse asks a node to connect back to the sender (reverse setup).
	KReverse = "reverse"
	// KReverseFail tells the asker that a reverse setup failed, and why.
	KReverseFail = "reverse-fail"
	// KMachine is a node telling its hub, on their link, its new machine
	// identifier (Machine: e.g. with an address a port mapping added), to
	// replace the one of its hello. Its ID and name must stay those of
	// the hello; the hub fills in the hub fields and the address it
	// observes. It is never routed.
	KMachine = "machine"
)

// Version is the protocol version hellos carry (2: virtual addresses,
// vipaddr.go; 3: trunks of several connections between hubs, lane.go;
// 4: a lookup's answer names the hubs it could not ask, unreached.go;
// 5: routing tables by change, delta.go; 6: a node tells the hub it
// moved from, moved.go; 7: a node's hello names its process, and a hub
// keeps one attachment per identity, instance.go).
const Version = VersionInstance

// Limits on decoded messages.
const (
	maxAddrs = 32
	maxName  = 64
	// maxHelloName bounds the name of a node's hello (checkMachine).
	maxHelloName = 1024
	maxRoutes    = 1024
	maxMatches   = 64
	// MaxTTL bounds the hops a routed message or an open may still travel.
	MaxTTL = 32
	maxTTL = MaxTTL
	// Unreachable is the hop count of a route that does not reach its hub
	// (an infinite metric).
	Unreachable = 255
)

// Message is one control message: Kind says which field is set.
type Message struct {
	Kind    string            `json:"kind"`
	Hello   *Hello            `json:"hello,omitempty"`
	Gossip  *Gossip           `json:"gossip,omitempty"`
	CRL     *CRL              `json:"crl,omitempty"` // KCRL (crl.go)
	Routed  *Routed           `json:"routed,omitempty"`
	Lookup  *Lookup           `json:"lookup,omitempty"`
	Found   *Found            `json:"found,omitempty"`
	Reverse *Reverse          `json:"reverse,omitempty"`
	Fail    *Fail             `json:"fail,omitempty"`
	Hubs    *HubsQuery        `json:"hubs,omitempty"`
	HubList *HubList          `json:"hub_list,omitempty"`
	Splice  *Splice           `json:"splice,omitempty"`
	Machine *identity.Machine `json:"machine,omitempty"`
	Refusal *Refusal          `json:"refusal,omitempty"` // names.go
	Claim   *Claim            `json:"claim,omitempty"`
	Claimed *Claimed          `json:"claimed,omitempty"`
	Moved   *Moved            `json:"moved,omitempty"` // moved.go
	// virtual addresses (vipaddr.go)
	Virtual     *Virtual     `json:"virtual,omitempty"`
	VirtualAck  *VirtualAck  `json:"virtual_ack,omitempty"`
	LookupAddr  *LookupAddr  `json:"lookup_addr,omitempty"`
	AddrClaim   *AddrClaim   `json:"addr_claim,omitempty"`
	AddrClaimed *AddrClaimed `json:"addr_claimed,omitempty"`
}

// Hello introduces one end of a hub link. A hub answers a node's hello with
// its own, with Observed set to the address it saw the node connect from.
type Hello struct {
	Role     string           `json:"role"` // "hub" or "node"
	Machine  identity.Machine `json:"machine"`
	Observed netip.AddrPort   `json:"observed,omitzero"`
	Version  int              `json:"version"`
	// Tunnel says the sender reached the other end through an ssh tunnel
	// whose sshd delays small writes (Nagle's algorithm left on), so the
	// link's small writes should be coalesced (see package hub).
	Tunnel bool `json:"tunnel,omitempty"`
	// Lane, only in the hello of a further connection of a trunk between
	// two hubs of VersionLanes or later, asks to join that trunk (lane.go).
	Lane *LaneJoin `json:"lane,omitempty"`
	// Instance, in a node's hello of VersionInstance or later, names the
	// process: InstanceSize hex digits drawn when its session starts. A
	// hub keeps one attachment per identity and lets a hello with the
	// holder's Instance replace it at once (instance.go).
	Instance string `json:"instance,omitempty"`
}

// Gossip is a hub's routing table as it sends it to one neighbour
// (DSDV: destination-sequenced distance vector), split over several
// messages if it does not fit in one; each entry stands alone. Before
// VersionDelta a hub sends its whole table periodically and on change;
// between hubs of VersionDelta or later, the whole table once and then the
// entries that changed (delta.go).
type Gossip struct {
	Routes []RouteAd `json:"routes"`
}

// RouteAd is the sender's route to one hub. The sender's own entry has Hops
// 0. State numbers are the destination hub's: it originates even numbers,
// increasing over time; a hub that loses its route to another declares it
// unreachable with the next odd number. An entry with an odd State or Hops
// Unreachable does not reach the hub through the sender.
type RouteAd struct {
	Hub       identity.ID      `json:"hub"`
	Name      string           `json:"name,omitempty"`
	State     uint64           `json:"state"`
	Hops      int              `json:"hops"`
	LatencyUs int64            `json:"latency_us"`      // the path's accumulated round-trip time
	Addrs     []netip.AddrPort `json:"addrs,omitempty"` // where the hub listens for hub links
	Nodes     int              `json:"nodes"`           // how many nodes are attached to it
	Ver       int              `json:"ver,omitempty"`   // the hub's protocol version; only to hubs of VersionDelta or later (delta.go)
}

// Reachable reports whether the entry offers a route.
func (r *RouteAd) Reachable() bool { return r.State%2 == 0 && r.Hops < Unreachable }

// Routed is a message for a hub (ToNode zero) or a node elsewhere.
type Routed struct {
	FromHub  identity.ID `json:"from_hub"`
	FromNode identity.ID `json:"from_node,omitzero"`
	ToHub    identity.ID `json:"to_hub"`
	ToNode   identity.ID `json:"to_node,omitzero"`
	TTL      int         `json:"ttl"`
	Msg      *Message    `json:"msg"`
}

// Lookup asks for nodes whose name or ID is Node.
type Lookup struct {
	Query uint64 `json:"query"`
	Node  string `json:"node"`
}

// Found answers a Lookup. Answered and Unreached: unreached.go.
type Found struct {
	Query     uint64             `json:"query"`
	Matches   []identity.Machine `json:"matches,omitempty"`
	Answered  int                `json:"answered,omitempty"`
	Unreached []HubUnreached     `json:"unreached,omitempty"`
}

// Reverse asks the target node to dial the sender back.
type Reverse struct {
	Token  uint64           `json:"token"`  // names the waiting dial on the sender
	From   identity.Machine `json:"from"`   // whom to dial, at which addresses
	Port   uint16           `json:"port"`   // the target's port the connection is for (SparePort: a spare)
	Target identity.ID      `json:"target"` // the node that should dial back
}

// SparePort, as the port of a reverse request or a splice offer, asks for
// a spare: a connection the target holds, once set up, until the asker
// names the port it is for over the connection itself (package vconn,
// spare.go: 'P', port; 'A' or 'R', reason). No virtual port is
// SparePort; a target that does not know spares answers it refused.
const SparePort uint16 = 0xffff

// Fail reports a failed request: Reason in words for people, Code (one of
// the Fail* constants, or empty: a cause none of them names) for the asker
// to decide and explain by. A receiver treats a code it does not know as
// empty.
type Fail struct {
	Token  uint64 `json:"token"`
	Reason string `json:"reason"`
	Code   string `json:"code,omitempty"`
}

// Fail codes: what the end that sent a reverse-fail or splice-fail (or a
// hub on the way, for FailNoHubRoute) measured. "The asker" is the node
// whose request failed; "the sender" is the node that answers it.
const (
	// FailNoHubRoute: a hub on the way has no route to the target's hub
	// (sent by that hub; the request never reached the target).
	FailNoHubRoute = "no-hub-route"
	// FailNotAttached: the target is not attached to the hub the request
	// was sent to (sent by that hub).
	FailNotAttached = "not-attached"
	// FailPortRefused: nothing on the sender listens on the port asked
	// for, or its access rules refuse the asker (Reason says which).
	FailPortRefused = "port-refused"
	// FailDisabled: the method is switched off on the sender.
	FailDisabled = "disabled"
	// FailNoRoute: the sender's own routing table has no route to the
	// asker's addresses (the sender is on a non-routed network).
	FailNoRoute = "no-route"
	// FailUnreachable: the sender has a route, but a router on the way
	// answered that the asker's addresses are unreachable.
	FailUnreachable = "unreachable"
	// FailTimeout: the sender's connections to the asker got no answer.
	FailTimeout = "timeout"
	// FailRejected: the asker's addresses answered the sender's
	// connections with a reset (a rejecting firewall, or nothing there).
	FailRejected = "rejected"
	// FailDenied: the handshake with the asker failed its identity or
	// admission check.
	FailDenied = "denied"
	// FailNATRandom: the sender's NAT allocates ports at random: its next
	// endpoint cannot be predicted.
	FailNATRandom = "nat-random"
	// FailNATUnknown: the sender's NAT could not be classified.
	FailNATUnknown = "nat-unknown"
	// FailCalledOff: a splice's dialler will not send the go for its
	// offer (its race ended another way, or it gave up): sent by the
	// dialler to the target, which stops waiting for it.
	FailCalledOff = "called-off"
)

// maxFailCode bounds a Fail's Code.
const maxFailCode = 32

// Open is the payload of a TOpen frame: a relayed connection request.
// ToHub zero means the target is attached to the opener's own hub.
type Open struct {
	From   identity.Machine `json:"from"`
	ToHub  identity.ID      `json:"to_hub,omitzero"`
	ToNode identity.ID      `json:"to_node"`
	Port   uint16           `json:"port"`
	TTL    int              `json:"ttl"`
	Window uint32           `json:"window"` // bytes the opener may receive before it grants more: 1 to MaxWindow
}

// Accept is the payload of a TAccept frame.
type Accept struct {
	Window uint32 `json:"window"` // bytes the acceptor may receive, from the first: InitialWindow to MaxWindow
}

// Encode marshals a message.
func Encode(m *Message) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("wire: encode %s: %v", m.Kind, err)) // only our own types: cannot fail
	}
	return b
}

// Decode unmarshals and checks a control message.
func Decode(p []byte) (*Message, error) {
	var m Message
	if err := strictUnmarshal(p, &m); err != nil {
		return nil, fmt.Errorf("%w: control message: %v", ErrFrame, err)
	}
	if err := m.check(0); err != nil {
		return nil, fmt.Errorf("%w: %s message: %v", ErrFrame, m.Kind, err)
	}
	return &m, nil
}

// DecodeOpen unmarshals and checks a TOpen payload.
func DecodeOpen(p []byte) (*Open, error) {
	var o Open
	if err := strictUnmarshal(p, &o); err != nil {
		return nil, fmt.Errorf("%w: open: %v", ErrFrame, err)
	}
	if err := checkMachine(&o.From); err != nil {
		return nil, fmt.Errorf("%w: open: %v", ErrFrame, err)
	}
	if o.TTL < 0 || o.TTL > maxTTL || o.ToNode.IsZero() {
		return nil, fmt.Errorf("%w: open: bad ttl %d or no target", ErrFrame, o.TTL)
	}
	if o.Window == 0 || o.Window > MaxWindow {
		return nil, fmt.Errorf("%w: open: window %d, want 1 to %d", ErrFrame, o.Window, MaxWindow)
	}
	return &o, nil
}

// DecodeAccept unmarshals a TAccept payload.
func DecodeAccept(p []byte) (*Accept, error) {
	var a Accept
	if err := strictUnmarshal(p, &a); err != nil {
		return nil, fmt.Errorf("%w: accept: %v", ErrFrame, err)
	}
	if a.Window < InitialWindow || a.Window > MaxWindow {
		return nil, fmt.Errorf("%w: accept: window %d, want %d to %d", ErrFrame, a.Window, InitialWindow, MaxWindow)
	}
	return &a, nil
}

func strictUnmarshal(p []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data")
	}
	return nil
}

func (m *Message) check(depth int) error {
	set := 0
	for _, p := range []bool{m.Hello != nil, m.Gossip != nil, m.Routed != nil, m.Lookup != nil, m.Found != nil, m.Reverse != nil, m.Fail != nil, m.Hubs != nil, m.HubList != nil, m.Splice != nil, m.Machine != nil, m.Refusal != nil, m.Claim != nil, m.Claimed != nil} {
		if p {
			set++
		}
	}
	if m.CRL != nil {
		set++
	}
	if m.Moved != nil {
		set++
	}
	set += m.virtualBodies()
	if set != 1 {
		return fmt.Errorf("%d bodies, want exactly 1", set)
	}
	if isVirtualKind(m.Kind) {
		return m.checkVirtual(depth)
	}
	var ok bool
	switch m.Kind {
	case KHello:
		ok = m.Hello != nil && (m.Hello.Role == "hub" || m.Hello.Role == "node")
		if ok {
			if err := m.Hello.checkLane(); err != nil {
				return err
			}
			if err := m.Hello.checkInstance(); err != nil {
				return err
			}
			return m.Hello.checkMachine()
		}
	case KGossip:
		ok = m.Gossip != nil
		if ok {
			return m.Gossip.check()
		}
	case KCRL:
		if depth > 0 {
			return fmt.Errorf("cannot route a %s message", m.Kind)
		}
		ok = m.CRL != nil
		if ok {
			return m.CRL.check()
		}
	case KRouted:
		r := m.Routed
		if r == nil || r.Msg == nil || r.TTL < 0 || r.TTL > maxTTL || depth > 0 {
			return fmt.Errorf("bad routed envelope")
		}
		if r.Msg.Kind == KRouted || r.Msg.Kind == KHello || r.Msg.Kind == KGossip || r.Msg.Kind == KMachine || r.Msg.Kind == KRefused || r.Msg.Kind == KMoved {
			return fmt.Errorf("cannot route a %s message", r.Msg.Kind)
		}
		return r.Msg.check(depth + 1)
	case KLookup:
		ok = m.Lookup != nil && m.Lookup.Node != "" && len(m.Lookup.Node) <= maxName
	case KFound:
		ok = m.Found != nil && len(m.Found.Matches) <= maxMatches
		if ok {
			if err := m.Found.checkUnreached(); err != nil {
				return err
			}
			for i := range m.Found.Matches {
				if err := checkMachine(&m.Found.Matches[i]); err != nil {
					return err
				}
			}
		}
	case KReverse:
		ok = m.Reverse != nil && m.Reverse.Port != 0
		if ok {
			return checkMachine(&m.Reverse.From)
		}
	case KReverseFail, KSpliceFail:
		ok = m.Fail != nil && len(m.Fail.Reason) <= 1024 && len(m.Fail.Code) <= maxFailCode
	case KHubs:
		ok = m.Hubs != nil
	case KHubList:
		ok = m.HubList != nil
		if ok {
			return (&Gossip{Routes: m.HubList.Hubs}).check()
		}
	case KMachine:
		ok = m.Machine != nil
		if ok {
			return checkMachine(m.Machine)
		}
	case KRefused:
		ok = m.Refusal != nil
		if ok {
			return m.Refusal.check()
		}
	case KClaim:
		ok = m.Claim != nil
		if ok {
			return m.Claim.check()
		}
	case KClaimed:
		ok = m.Claimed != nil
		if ok {
			return m.Claimed.check()
		}
	case KMoved:
		ok = m.Moved != nil
		if ok {
			return m.Moved.check()
		}
	case KSplice, KSpliceReply, KSpliceGo:
		ok = m.Splice != nil
		if ok {
			return m.Splice.check(m.Kind)
		}
	default:
		return fmt.Errorf("unknown kind %q", m.Kind)
	}
	if !ok {
		return fmt.Errorf("missing or malformed body")
	}
	return nil
}

func (g *Gossip) check() error {
	if len(g.Routes) > maxRoutes {
		return fmt.Errorf("%d routes, more than %d", len(g.Routes), maxRoutes)
	}
	for i := range g.Routes {
		r := &g.Routes[i]
		switch {
		case r.Hub.IsZero():
			return fmt.Errorf("route without a hub")
		case len(r.Name) > maxName:
			return fmt.Errorf("hub name too long")
		case len(r.Addrs) > maxAddrs:
			return fmt.Errorf("hub %s lists more than %d addresses", r.Hub.Short(), maxAddrs)
		case r.Hops < 0 || r.Hops > Unreachable:
			return fmt.Errorf("hub %s: %d hops", r.Hub.Short(), r.Hops)
		case r.LatencyUs < 0 || r.Nodes < 0:
			return fmt.Errorf("hub %s: negative latency or node count", r.Hub.Short())
		case r.Ver < 0 || r.Ver > maxVer:
			return fmt.Errorf("hub %s: protocol version %d", r.Hub.Short(), r.Ver)
		}
	}
	return nil
}

// checkMachine checks a hello's machine. A node's hello may give a name
// longer than any other message carries (up to maxHelloName), so that
// its hub reads it and refuses it by name (RefusedBadName) instead of
// closing the link on a malformed frame, which the node would take for
// a failure worth retrying; what a name may be is the hub's to judge
// (identity.CheckName).
func (h *Hello) checkMachine() error {
	if h.Role != "node" || len(h.Machine.Name) <= maxName {
		return checkMachine(&h.Machine)
	}
	if len(h.Machine.Name) > maxHelloName {
		return fmt.Errorf("hello name of %d bytes, more than %d", len(h.Machine.Name), maxHelloName)
	}
	m := h.Machine
	m.Name = ""
	return checkMachine(&m)
}

func checkMachine(m *identity.Machine) error {
	switch {
	case m.ID.IsZero():
		return fmt.Errorf("machine without an ID")
	case len(m.Name) > maxName || len(m.HubName) > maxName:
		return fmt.Errorf("machine name too long")
	case len(m.Addrs) > maxAddrs || len(m.Observed) > maxAddrs:
		return fmt.Errorf("machine %s lists more than %d addresses", m.ID.Short(), maxAddrs)
	}
	return checkMachineVirtual(m)
}
