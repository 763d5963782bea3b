package hubserver

import (
	"sync/atomic"

	"github.com/gridlink/gridlink/status"
	"github.com/gridlink/gridlink/wire"
)

// What a hub counts for its metrics (Counters): circuit payload switched,
// circuits opened, refusals by reason. Each is an atomic add where it
// happens (one per data frame switched); Counters reads them at once.

// refusalKinds are the refusals counted, in the order of the counters:
// What ("connection" or "circuit") and Reason (status.Refused*).
var refusalKinds = [...]struct{ what, reason string }{
	{"connection", status.RefusedNotAdmitted},
	{"connection", status.RefusedRole},
	{"connection", status.RefusedName},
	{"connection", status.RefusedNameTaken},
	{"connection", status.RefusedShed},
	{"circuit", status.RefusedNoRoute},
	{"circuit", status.RefusedNotAttached},
	{"circuit", status.RefusedHops},
	{"circuit", status.RefusedLinkLost},
	{"circuit", status.RefusedBadOpen},
	{"connection", status.RefusedLane},
	{"connection", status.RefusedBadName},
	{"connection", status.RefusedAttached},
}

// refusal indexes refusalKinds.
type refusal int

const (
	refNotAdmitted refusal = iota
	refRole
	refName
	refNameTaken
	refShed
	refNoRoute
	refNotAttached
	refHops
	refLinkLost
	refBadOpen
	refLane
	refBadName
	refAttached
)

// hubCounters are a hub's counts (Hub.counts).
type hubCounters struct {
	off     bool          // Config.NoCounters: count nothing
	bytes   atomic.Uint64 // circuit payload bytes passed on
	opened  atomic.Uint64 // circuits opened through this hub
	refused [len(refusalKinds)]atomic.Uint64
	// control is the bytes of trunk-level frames sent to other hubs
	// (hub.Trunk.CountControl): gossip, routed messages, lookups,
	// claims, revocation lists, trunk pings and pongs.
	control atomic.Uint64
	// gossip is the routing table messages (KGossip) sent.
	gossip atomic.Uint64
}

func (c *hubCounters) refuse(r refusal) {
	if !c.off {
		c.refused[r].Add(1)
	}
}

// circuit counts a circuit opened.
func (c *hubCounters) circuit() {
	if !c.off {
		c.opened.Add(1)
	}
}

// switched counts n bytes of circuit payload passed on.
func (c *hubCounters) switched(n int) {
	if !c.off {
		c.bytes.Add(uint64(n))
	}
}

// linkRefusal is the counted reason of a link refusal's wire code (the
// wire.Refused* codes; a code added later counts as name until it
// is given a reason of its own here).
func linkRefusal(code string) refusal {
	switch code {
	case wire.RefusedRole:
		return refRole
	case wire.RefusedNameTaken:
		return refNameTaken
	case wire.RefusedLane:
		return refLane
	case wire.RefusedBadName:
		return refBadName
	case wire.RefusedAttached:
		return refAttached
	}
	return refName
}

// Counters returns what the hub counted since it started.
func (h *Hub) Counters() status.HubCounters {
	out := status.HubCounters{SwitchedBytes: h.counts.bytes.Load(), CircuitsOpened: h.counts.opened.Load()}
	for i, k := range refusalKinds {
		out.Refusals = append(out.Refusals, status.Refusal{What: k.what, Reason: k.reason, Count: h.counts.refused[i].Load()})
	}
	return out
}

// ControlSent is how many bytes of trunk-level frames (control messages,
// trunk pings and pongs; not circuit frames) the hub sent to other hubs
// since it started: what routing, lookups and names cost on trunks.
func (h *Hub) ControlSent() uint64 { return h.counts.control.Load() }
