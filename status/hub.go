package status

import (
	"net/netip"

	"github.com/gridlink/gridlink/identity"
)

// Hub is what a hub reports on its status socket (GET /status).
type Hub struct {
	Name   string             `json:"name"`
	ID     identity.ID        `json:"id"`
	Addr   string             `json:"addr"` // its listening address
	Routes []Route            `json:"routes"`
	Links  []Link             `json:"links"`
	Nodes  []identity.Machine `json:"nodes"` // attached to it
}

// Route is the hub's route to another hub (distance-vector routing).
type Route struct {
	Hub       identity.ID      `json:"hub"`
	Name      string           `json:"name"`
	Reachable bool             `json:"reachable"`
	NextHop   identity.ID      `json:"next_hop,omitzero"` // zero when unreachable
	Hops      int              `json:"hops"`              // wire.Unreachable when unreachable
	LatencyMS float64          `json:"latency_ms"`        // the route's measured latency
	State     uint64           `json:"state"`             // the route's sequence number: odd when unreachable
	Addrs     []netip.AddrPort `json:"addrs,omitempty"`   // where that hub listens
	Nodes     int              `json:"nodes"`             // nodes attached to it
}

// Link is one of the hub's links: to a neighbour hub or an attached node.
type Link struct {
	Peer        identity.ID    `json:"peer"`
	Name        string         `json:"name"`
	Role        string         `json:"role"`            // "hub" or "node"
	Remote      netip.AddrPort `json:"remote,omitzero"` // zero through a tunnel (ssh, proxy)
	Dialed      bool           `json:"dialed"`          // this hub dialled the link
	RTTMS       float64        `json:"rtt_ms"`          // the link's round trip
	Circuits    int            `json:"circuits"`        // circuits open over it
	QueuedBytes int            `json:"queued_bytes"`    // waiting to be written
	// Connections is how many TCP connections a trunk between hubs
	// carries (its lanes); Congestion its first one's TCP congestion
	// control ("bbr", "cubic"; empty where unknown).
	Connections int    `json:"connections,omitempty"`
	Congestion  string `json:"congestion,omitempty"`
}
