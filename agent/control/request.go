package control

import "strings"

// The control API's requests. Answers without a stream are JSON
// (package status); a failed request is an HTTP error whose body is a
// JSON StreamError (a Refusal when the caller's uid is refused).
//
//	GET  /status                        → status.Agent
//	POST /ping     PingRequest          → status.Ping
//	POST /doctor   DoctorRequest        → status.Diagnosis
//	POST /perf     PerfRequest          → status.Perf
//	POST /connect  ConnectRequest       → a stream (stream.go)
//	POST /bind     BindRequest          → a stream
//	POST /expose   ExposeRequest        → a stream
//	GET  /stream/ID/end                 → Event (streamend.go)

// PingRequest is the body of POST /ping.
type PingRequest struct {
	Addr  string `json:"addr"`  // NODE[:PORT][@HUB]; port defaults to the echo port
	Count int    `json:"count"` // round trips per connection (default 3)
	Dials int    `json:"dials"` // connections to set up one after another (default 2: uncached, cached)
	Fresh bool   `json:"fresh"` // forget cached methods, names, addresses and spares first
}

// DoctorRequest is the body of POST /doctor.
type DoctorRequest struct {
	Addr string `json:"addr,omitempty"` // a target to diagnose; empty: this host only
}

// PerfRequest is the body of POST /perf.
type PerfRequest struct {
	Addr    string  `json:"addr"`    // NODE[:PORT]; the sink port by default
	Seconds float64 `json:"seconds"` // how long to send (default 5)
}

// LinkOptions are the link options a stream request asks for (see
// link.Options).
type LinkOptions struct {
	Streams     int    `json:"streams,omitempty"`     // 0/1: one, N, or link.Auto
	MaxStreams  int    `json:"max_streams,omitempty"` // default link.DefaultMaxStreams
	Compression string `json:"compression,omitempty"` // off, s2, zstd, auto
	Plain       bool   `json:"plain,omitempty"`       // authenticated plain
	// ResumeSeconds: the link is resumable (link.Options.Resume): it
	// survives the death of the connections beneath it (a hub on the
	// path, a cut), resending what they carried over a connection set up
	// again by whatever method works then, for up to this many seconds
	// without any (the peer may agree to less) before it fails naming
	// what died and when. 0: 30 s; negative: not resumable (a lost
	// connection ends the stream).
	ResumeSeconds float64 `json:"resume_seconds,omitempty"`
	// Upgrade: a resumable link set up by a method other than direct
	// moves to a more direct connection once one can be set up, while it
	// runs (link.Options.Upgrade).
	Upgrade bool `json:"upgrade,omitempty"`
}

// ConnectRequest is the body of POST /connect.
type ConnectRequest struct {
	// Addr is a virtual address NODE[.grid]:PORT[@HUB]; with Exit, a TCP
	// HOST:PORT that the exit node dials.
	Addr string      `json:"addr"`
	Exit string      `json:"exit,omitempty"` // node whose agent allows exits (agent.ExitPort)
	Link LinkOptions `json:"link"`
	// Handoff offers the local end of the stream as file descriptors
	// after the upgrade (handoff.go), for the agent to copy itself.
	Handoff bool `json:"handoff,omitempty"`
}

// BindRequest is the body of POST /bind.
type BindRequest struct {
	// Peer is the node admitted, NODE[.grid][@HUB] (a SOCKS client's
	// DST.ADDR): the agent looks it up when the bind starts and refuses
	// any other dialler, naming it, while it waits. Required.
	Peer       string `json:"peer"`
	Port       uint16 `json:"port,omitempty"` // virtual port; 0: a free one, chosen at random
	AllowPlain bool   `json:"allow_plain,omitempty"`
	// Wait bounds the wait for the peer (default 5 min).
	WaitSeconds float64 `json:"wait_seconds,omitempty"`
}

// ExposeRequest is the body of POST /expose.
type ExposeRequest struct {
	Local      string `json:"local"`          // TCP HOST:PORT the agent dials for each link
	Port       uint16 `json:"port,omitempty"` // virtual port; 0: a free one
	AllowPlain bool   `json:"allow_plain,omitempty"`
	// Name, if set, names the service in the agent's directory: others
	// dial NODE:NAME (agent.ServicesPort).
	Name string `json:"name,omitempty"`
}

// GridDomain is the pseudo-domain of overlay names: NAME.grid:PORT is the
// node NAME's port, as SOCKS clients and ssh write it.
const GridDomain = ".grid"

// VirtualAddr is addr with a trailing GridDomain on its node removed (in
// any case, as DNS names: NODE.Grid, node.GRID).
func VirtualAddr(addr string) string {
	node, rest := addr, ""
	if i := strings.IndexAny(addr, ":@"); i >= 0 {
		node, rest = addr[:i], addr[i:]
	}
	if HasGridDomain(node) {
		node = node[:len(node)-len(GridDomain)]
	}
	return node + rest
}

// HasGridDomain says whether host ends in GridDomain, in any case.
func HasGridDomain(host string) bool {
	return len(host) > len(GridDomain) && strings.EqualFold(host[len(host)-len(GridDomain):], GridDomain)
}
