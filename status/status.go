// Package status is the schema of what a node agent and a hub report:
// the JSON answers of the agent's control API (GET /status, POST /ping,
// /doctor, /perf; package agent serves them, agent/control asks for
// them) and of a hub's status socket (GET /status), which the CLI prints
// (`gridlink status`, `ping`, `doctor`, `perf`, each with --json) and the
// lab parses; and the counters a node and a hub keep, which package
// metrics exposes (counters.go). One Go type per JSON object, with its field names written
// out in tags; a quantity carries its unit in its name (setup_ms,
// latency_ms, queued_bytes, lease_s, mbit_per_s); times are RFC 3339.
//
// It owns the shapes and their words (NAT.Words, PortMap.Words), not how
// they are measured or served: it imports identity only, so that a client
// of the agent, the CLI and the lab can read reports without linking the
// overlay (internal/archtest holds it to that).
package status

import (
	"time"

	"github.com/gridlink/gridlink/identity"
)

// Agent is the node agent's status, the answer of GET /status.
type Agent struct {
	Node identity.Machine `json:"node"`
	// Attach is empty while the node is attached to a hub, else what its
	// session is doing: "attaching to HUB: reason, retrying (not attached
	// since T)", or the refusal that ended it.
	Attach string `json:"attach,omitempty"`
	// HubChoice is the place of the node's hub among the hubs it was
	// given (1: the first, its home; 0 while it has none), of Hubs. A
	// node on a later one returns to an earlier one once that admits it
	// again, unless NoReturn.
	HubChoice int  `json:"hub_choice,omitempty"`
	Hubs      int  `json:"hubs,omitempty"`
	NoReturn  bool `json:"no_return,omitempty"`
	// Observed is this host's address as its hub sees it (IP:PORT).
	Observed string `json:"observed,omitempty"`
	// Conns are the open virtual connections.
	Conns []Conn `json:"conns"`
	// Links are the links of the agent's connect streams (nc, forward,
	// socks), the oldest first.
	Links []StreamLink `json:"links,omitempty"`
	// Cache is the per-site method cache: target hub (short ID) → method.
	Cache   map[string]string `json:"cache"`
	NAT     NAT               `json:"nat"`
	PortMap PortMap           `json:"port_map"`
	// VIP is the node's virtual IP network, while it runs one.
	VIP *VIP `json:"vip,omitempty"`
	// Credentials are its proxy or certificate and its revocation lists,
	// with their lifetimes (none in an open grid).
	Credentials []Credential `json:"credentials,omitempty"`
}

// Conn is one open virtual connection.
type Conn struct {
	Local  string `json:"local"`  // NODE:PORT
	Remote string `json:"remote"` // NODE:PORT
	Method string `json:"method"` // direct, reverse, splice or routed
	// SentBytes and ReceivedBytes are the payload written and read over
	// it so far (TLS overhead not included).
	SentBytes     uint64 `json:"sent_bytes"`
	ReceivedBytes uint64 `json:"received_bytes"`
}

// StreamLink is the link of one of the agent's connect streams: the path
// it takes now and, with --upgrade, its moves to more direct ones.
type StreamLink struct {
	Stream uint64 `json:"stream"` // the stream's ID (Gridlink-Stream)
	Remote string `json:"remote"` // NODE:PORT as asked
	// Method is the most direct method among the link's connections now:
	// direct, reverse, splice or routed.
	Method    string `json:"method"`
	Resumable bool   `json:"resumable"`
	Upgrade   bool   `json:"upgrade"` // it looks for a more direct path now
	// Switches are its live path upgrades, the oldest first.
	Switches []PathSwitch `json:"switches,omitempty"`
}

// PathSwitch is a link's move from one method to a more direct one.
type PathSwitch struct {
	From string    `json:"from"`
	To   string    `json:"to"`
	At   time.Time `json:"at"`
}

// Ping is the answer of POST /ping: Dials connections set up one after
// another (the first uncached), each used for Count echo round trips.
type Ping struct {
	Addr    string    `json:"addr"`
	Peer    string    `json:"peer"`
	Method  string    `json:"method"`   // of the first connection
	Methods []string  `json:"methods"`  // of every connection
	SetupMS []float64 `json:"setup_ms"` // setup time of every connection
	Spare   []bool    `json:"spare"`    // whether each connection used a spare (vconn.Config.SpareTTL)
	RTTMS   []float64 `json:"rtt_ms"`   // round trips, Count on every connection
	Error   string    `json:"error,omitempty"`
}

// Perf is the answer of POST /perf: bytes sent to a node's sink and the
// rate the sink confirmed.
type Perf struct {
	Addr     string  `json:"addr"`
	Method   string  `json:"method"`
	Bytes    int64   `json:"bytes"`      // the count the sink received
	Seconds  float64 `json:"seconds"`    // from the first byte to the sink's count
	MbitPerS float64 `json:"mbit_per_s"` // Bytes*8/Seconds/1e6
	Error    string  `json:"error,omitempty"`
}

// Diagnosis is the answer of POST /doctor: this host and, for a target,
// every method tried toward it.
type Diagnosis struct {
	Node identity.Machine `json:"node"`
	Host []string         `json:"host"` // findings about this host, in plain words
	// Credentials are the node's, as in its status: doctor warns of one
	// expiring and fails on one expired.
	Credentials []Credential      `json:"credentials,omitempty"`
	NAT         NAT               `json:"nat"`      // this host's NAT, as the hubs observed it
	PortMap     PortMap           `json:"port_map"` // whether a port mapping was obtained
	Target      *identity.Machine `json:"target,omitempty"`
	Methods     []MethodCheck     `json:"methods,omitempty"`
	Verdict     string            `json:"verdict,omitempty"`
	LookupMS    float64           `json:"lookup_ms,omitempty"` // finding the target through the hubs
}

// MethodCheck is one method tried toward a doctor's target.
type MethodCheck struct {
	Method string  `json:"method"`
	OK     bool    `json:"ok"`
	MS     float64 `json:"ms,omitempty"`    // how long the try took, in milliseconds
	Why    string  `json:"why"`             // plain words
	Error  string  `json:"error,omitempty"` // the raw error
	End    string  `json:"end,omitempty"`   // where the cause lies: "this host", "target" or "path"
	Cause  string  `json:"cause,omitempty"` // what was measured there (vconn's cause kinds, in words)
}
