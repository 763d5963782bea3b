package status

// ExitCounters is what a node agent's exit service (gridlink node
// --allow-exit) counted since it started: exits opened (the destination
// connected), exits that failed (the destination could not be resolved
// or connected), refusals by reason, and the bytes carried, added as each
// exit ends. metrics.Node.ExitCounters reads it.
type ExitCounters struct {
	Opened        uint64        `json:"opened"`
	Failed        uint64        `json:"failed"`
	Refused       []ExitRefusal `json:"refused"`        // every reason, zero counts included
	SentBytes     uint64        `json:"sent_bytes"`     // from members, written to their destinations
	ReceivedBytes uint64        `json:"received_bytes"` // read from destinations, passed to members
}

// Reasons an exit refused a destination (ExitRefusal.Reason), in the
// order ExitCounters.Refused lists them.
const (
	ExitRefusedBadRequest  = "bad_request" // not HOST:PORT, or port 0
	ExitRefusedLoopback    = "loopback"    // 127.0.0.0/8, ::1
	ExitRefusedLinkLocal   = "link_local"  // 169.254.0.0/16, fe80::/10
	ExitRefusedUnspecified = "unspecified" // 0.0.0.0/8, ::
	ExitRefusedMulticast   = "multicast"   // 224.0.0.0/4, ff00::/8
	ExitRefusedBroadcast   = "broadcast"   // 255.255.255.255, the exit host's subnets' broadcast addresses
	ExitRefusedOwnAddress  = "own_address" // an address of one of the exit host's interfaces
	ExitRefusedPrivate     = "private"     // a private range or the grid's virtual prefixes, not listed by --exit-allow
	ExitRefusedPort        = "port"        // listed by --exit-allow, but not on that port
	ExitRefusedPerMember   = "per_member"  // the member has the most exits open at once already
)

// ExitRefusalReasons lists the Exit* refusal reasons in their order.
var ExitRefusalReasons = []string{ExitRefusedBadRequest, ExitRefusedLoopback, ExitRefusedLinkLocal,
	ExitRefusedUnspecified, ExitRefusedMulticast, ExitRefusedBroadcast, ExitRefusedOwnAddress,
	ExitRefusedPrivate, ExitRefusedPort, ExitRefusedPerMember}

// ExitRefusal counts an exit's refusals for one reason.
type ExitRefusal struct {
	Reason string `json:"reason"`
	Count  uint64 `json:"count"`
}
