package status

// Counters: what a node or a hub counted since it started, read at once
// (each count an atomic read, no lock held across them). Package metrics
// exposes them to Prometheus; their JSON names follow this package's
// units-in-names rule. Counts only grow while the process runs.

// Path kinds of a node's bytes (PathBytes.Path): the setup methods, and
// the virtual network's packets.
const (
	PathDirect  = "direct"
	PathReverse = "reverse"
	PathSplice  = "splice"
	PathRouted  = "routed"
	// PathVirtual is the virtual IP network's packets (package vip):
	// metrics.Node.Virtual reports them where a node runs one (Open: its
	// peers with a connection).
	PathVirtual = "virtual"
)

// Outcomes of a setup attempt (SetupCount.Outcome).
const (
	SetupOK       = "ok"       // the method connected (the race may still have picked another)
	SetupFailed   = "failed"   // it did not connect
	SetupRefused  = "refused"  // the target was reached and said no
	SetupCanceled = "canceled" // given up: the race was decided, or the caller stopped
)

// NodeCounters is what a node counted: bytes by path, setups by method
// and outcome, and how long the setups that made connections took.
type NodeCounters struct {
	Paths      []PathBytes  `json:"paths"`       // one per path kind, in the order of the Path* constants
	Setups     []SetupCount `json:"setups"`      // every method and outcome, zero counts included
	SetupTimes []Histogram  `json:"setup_times"` // dialled connections' setup times, one per method
}

// PathBytes are the bytes of a node's virtual connections of one path kind:
// payload its programs wrote and read (TLS overhead not included), and
// how many such connections are open.
type PathBytes struct {
	Path          string `json:"path"`
	SentBytes     uint64 `json:"sent_bytes"`
	ReceivedBytes uint64 `json:"received_bytes"`
	Open          int    `json:"open"`
}

// SetupCount counts the setup attempts of one method with one outcome.
type SetupCount struct {
	Method  string `json:"method"`
	Outcome string `json:"outcome"`
	Count   uint64 `json:"count"`
}

// Histogram is a distribution of durations in seconds: Counts[i]
// observations at most UpperS[i] (cumulative, as Prometheus buckets are),
// Count in all (the +Inf bucket), SumS their sum.
type Histogram struct {
	Method string    `json:"method"`
	UpperS []float64 `json:"upper_s"`
	Counts []uint64  `json:"counts"`
	Count  uint64    `json:"count"`
	SumS   float64   `json:"sum_s"`
}

// Reasons a hub refused a connection or a circuit (Refusal.Reason).
const (
	// connections, before or at their hello
	RefusedNotAdmitted = "not-admitted" // the TLS handshake's verdict: certificate, chain, revocation
	RefusedRole        = "role"         // the certificate's role does not allow what the hello asked
	RefusedName        = "name"         // the certificate does not certify the hello's name
	RefusedNameTaken   = "name-taken"   // another identity holds the name
	RefusedShed        = "shed"         // the gate shed a pending handshake (too many pending)
	RefusedAttached    = "attached"     // another process with the node's identity is attached there and answers
	// circuits
	RefusedNoRoute     = "no-route"      // no route to the target hub
	RefusedNotAttached = "not-attached"  // the target node is not attached here
	RefusedHops        = "too-many-hops" // the open's hop budget ran out
	RefusedLinkLost    = "link-lost"     // the next hop's link went while opening
	RefusedBadOpen     = "bad-open"      // an open without a target hub, or one that could not be passed on
	// a connection asking to join a trunk between hubs as a further one
	RefusedLane = "lane" // no such trunk, a proof that does not match it, or no more connections taken
	// a hello whose name is not a name (identity.CheckName)
	RefusedBadName = "bad-name"
)

// HubCounters is what a hub counted.
type HubCounters struct {
	SwitchedBytes  uint64    `json:"switched_bytes"`  // circuit payload passed on, each byte once per hop through this hub
	CircuitsOpened uint64    `json:"circuits_opened"` // circuits this hub passed an open on for
	Refusals       []Refusal `json:"refusals"`        // every reason, zero counts included
}

// Refusal counts a hub's refusals of one kind: What is "connection" or
// "circuit", Reason one of the Refused* reasons.
type Refusal struct {
	What   string `json:"what"`
	Reason string `json:"reason"`
	Count  uint64 `json:"count"`
}

// TransferCounters is what a transfer service counted (package xfer's
// Server.Counters): its sessions by operation and outcome, and their files
// and bytes, added when each session ends; and the bytes moved as they go.
type TransferCounters struct {
	Ops   []TransferOp    `json:"ops"`   // one per operation and outcome, zero counts included
	Moved []TransferMoved `json:"moved"` // one per operation
}

// TransferMoved is the file data sessions of one operation moved,
// counted as they go, running sessions included: a get's as its blocks
// are sent, a put's as each file is stored; a push's is not counted here
// (its sessions' SentBytes are, when they end).
type TransferMoved struct {
	Op    string `json:"op"`
	Bytes uint64 `json:"bytes"`
}

// TransferOp counts the sessions of one operation ("get": the client
// copied from the service; "put": to it; "push": the service sent to
// another, third-party) that ended with one outcome ("ok" or "failed"),
// and what they moved: files stored and verified, entries that failed,
// file data sent over their links, and bytes the receiver already had and
// kept (resume).
type TransferOp struct {
	Op        string `json:"op"`
	Outcome   string `json:"outcome"`
	Sessions  uint64 `json:"sessions"`
	Files     uint64 `json:"files"`
	Failed    uint64 `json:"failed"`
	SentBytes uint64 `json:"sent_bytes"`
	KeptBytes uint64 `json:"kept_bytes"`
}
