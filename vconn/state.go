package vconn

import (
	"net/netip"
	"sync"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
)

// A node's state, grouped by concern, each group under its own lock (as
// wireguard-go's Device keeps state, net and peers apart). No group's lock
// is held while another's is taken, so they have no order.

// ports are the node's virtual listeners, by port (node.go).
type ports struct {
	mu        sync.Mutex
	listeners map[uint16]*Listener
}

// openConns are the node's open virtual connections (node.go), for status
// and for closing those a revocation cuts (revocation.go).
type openConns struct {
	mu  sync.Mutex
	set map[*Conn]struct{}
}

// memory is what past setups taught: the method that won per target hub
// (dial.go) and the machines names named (names.go).
type memory struct {
	mu      sync.Mutex
	methods map[identity.ID]Method // per target hub
	names   map[string]nameEntry   // by NODE@HUB
}

type nameEntry struct {
	m  identity.Machine
	at time.Time
}

// rendezvous are the setups in progress that wait for the other end:
// reverse setups this node asked for and the calls back it makes, and
// splices either way (method_reverse.go, accept.go, splice.go).
type rendezvous struct {
	mu        sync.Mutex
	reverses  map[uint64]*pendingReverse // ours, by token
	callbacks map[uint64]uint16          // the calls back we make: token → our port
	splices   map[uint64]*pendingSplice  // by token
}

// spares are connections set up in advance (spare.go): ours to targets
// (direct, reverse or spliced), and those of others held for their port.
type spares struct {
	mu       sync.Mutex
	byTarget map[identity.ID][]*spare
	count    int                       // in byTarget, all targets
	flights  map[spareKey]*spareFlight // being set up, by target and method
	inflight int                       // being set up, all targets
	held     map[*direct.Conn]bool     // others' spares waiting for their port
}

// self is what this host knows of itself that its peers judge methods by
// (natstate.go).
type self struct {
	mu            sync.Mutex
	nat           natState
	natExternal   netip.Addr // the NAT this host is behind: its external address (publishNAT)
	natSequential bool       // that NAT is sequential (publishNAT)
	nonRouted     bool       // this host has no default route (publishRoute)
}
