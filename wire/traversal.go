package wire

import (
	"bytes"
	"fmt"
	"net/netip"

	"github.com/gridlink/gridlink/identity"
)

// Messages for NAT traversal: learning which hubs can observe this node
// from outside its NAT, and the rendezvous of a TCP splice (simultaneous
// open) between two nodes, relayed as routed messages.
const (
	// KHubs asks the node's hub for the hubs it knows (HubsQuery).
	KHubs = "hubs"
	// KHubList answers KHubs: every hub the answering hub has a route
	// to, itself first (HubList).
	KHubList = "hub-list"
	// KSplice is a dialler's splice offer to a target node: its predicted
	// external endpoints and the port it wants (Splice).
	KSplice = "splice"
	// KSpliceReply is the target's answer: its predicted endpoints. The
	// target starts connecting when the go arrives.
	KSpliceReply = "splice-reply"
	// KSpliceGo tells the target to start connecting now; the dialler
	// starts half the measured round trip later. An early answer
	// (Splice.RTTUs, Splice.Early) needs none.
	KSpliceGo = "splice-go"
	// KSpliceFail says the target cannot take part, and why (Fail); from
	// the dialler to the target (Code FailCalledOff), that the dialler
	// will send no go: the target frees the port it holds for it.
	KSpliceFail = "splice-fail"
)

// maxSpliceAddrs bounds the endpoints a splice message predicts.
const maxSpliceAddrs = 8

// HubsQuery is the body of KHubs.
type HubsQuery struct {
	Query uint64 `json:"query"`
}

// HubList is the body of KHubList: routes as gossip carries them.
type HubList struct {
	Query uint64    `json:"query"`
	Hubs  []RouteAd `json:"hubs"`
}

// Splice is one step of a splice rendezvous. From and Port are set in the
// offer only.
type Splice struct {
	Token   uint64            `json:"token"`
	Attempt int               `json:"attempt"`
	From    *identity.Machine `json:"from,omitempty"`
	Port    uint16            `json:"port,omitempty"`
	Target  identity.ID       `json:"target"`
	Addrs   []netip.AddrPort  `json:"addrs,omitempty"` // predicted external endpoints, most likely first
	// HeldUs, in a reply, is how long the target took to answer (µs): the
	// dialler takes it off the round trip it measures.
	HeldUs int64 `json:"held_us,omitempty"`
	// RTTUs, in an offer, is the dialler's estimate of the round trip
	// between the two ends (µs), asking for an early answer: the target
	// connects about half of it after its reply (nat.AnswerEarly: three
	// quarters), without waiting for the go.
	RTTUs int64 `json:"rtt_us,omitempty"`
	// Early, in a reply, says the target answers early (RTTUs): the
	// dialler connects at once and sends no go.
	Early bool `json:"early,omitempty"`
}

func (s *Splice) check(kind string) error {
	switch {
	case s.Attempt < 0 || s.Attempt > 16:
		return fmt.Errorf("attempt %d", s.Attempt)
	case s.HeldUs < 0 || s.HeldUs > 60e6:
		return fmt.Errorf("held %d µs", s.HeldUs)
	case s.RTTUs < 0 || s.RTTUs > 60e6 || s.RTTUs != 0 && kind != KSplice:
		return fmt.Errorf("round trip estimate %d µs in a %s message", s.RTTUs, kind)
	case s.Early && kind != KSpliceReply:
		return fmt.Errorf("early in a %s message", kind)
	case len(s.Addrs) > maxSpliceAddrs:
		return fmt.Errorf("%d endpoints, more than %d", len(s.Addrs), maxSpliceAddrs)
	case kind == KSplice && (s.From == nil || s.Port == 0 || len(s.Addrs) == 0):
		return fmt.Errorf("offer without its sender, port or endpoints")
	case kind == KSpliceReply && len(s.Addrs) == 0:
		return fmt.Errorf("reply without endpoints")
	case kind != KSplice && s.From != nil:
		return fmt.Errorf("sender in a %s message", kind)
	}
	for _, a := range s.Addrs {
		if !a.IsValid() || a.Port() == 0 || !a.Addr().Is4() && !a.Addr().Is6() {
			return fmt.Errorf("bad endpoint %v", a)
		}
	}
	if s.From != nil {
		return checkMachine(s.From)
	}
	return nil
}

// # Observation
//
// A hub tells whoever asks the address and port it sees them connect
// from, as STUN does for UDP: a node behind a NAT learns its external
// endpoints this way. On a hub's listening port, a connection that starts
// with ObserveRequest instead of a TLS handshake gets one line back and is
// closed:
//
//	client: "GRIDLINK-OBSERVE\n"
//	hub:    "OBSERVED 203.0.113.17:40001\n"
//
// The answer is unauthenticated: a lying hub can spoil a prediction, and
// the splice then fails its identity check and falls back, but it cannot
// make anyone reach the wrong peer.
const (
	ObserveRequest = "GRIDLINK-OBSERVE\n"
	observedPrefix = "OBSERVED "
	// MaxObserved bounds an observation answer.
	MaxObserved = 64
)

// AppendObserved appends the answer naming ap.
func AppendObserved(dst []byte, ap netip.AddrPort) []byte {
	return append(append(append(dst, observedPrefix...), ap.String()...), '\n')
}

// ParseObserved decodes an observation answer (with or without its
// newline).
func ParseObserved(b []byte) (netip.AddrPort, error) {
	if len(b) > MaxObserved {
		return netip.AddrPort{}, fmt.Errorf("%w: observation of %d bytes", ErrFrame, len(b))
	}
	rest, ok := bytes.CutPrefix(bytes.TrimSuffix(b, []byte("\n")), []byte(observedPrefix))
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("%w: observation %q does not start with %q", ErrFrame, b, observedPrefix)
	}
	ap, err := netip.ParseAddrPort(string(rest))
	if err != nil || ap.Port() == 0 || ap.Addr().Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("%w: observation %q: not an address (without zone) and port", ErrFrame, b)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}
