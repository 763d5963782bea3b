package vip

import (
	"bytes"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/gridlink/gridlink/identity"
)

// reason is why a packet was dropped; Drops has one counter per reason.
type reason int

const (
	dropMalformed     reason = iota // Parse refused it (either direction)
	dropNotUnicast                  // from the device, to a multicast, broadcast or link-local address
	dropSourceNotOurs               // from the device, with a source that is not this node's
	dropTooBig                      // larger than the tunnel MTU (ICMP sent) or, received, the device's
	dropNoRoute                     // no node holds the destination (ICMP sent when the directory says so)
	dropQueueFull                   // the peer's queue (or the wait for its lookup) was full
	dropConnLost                    // queued or in flight when the peer's connection ended
	dropNoConnection                // the peer could not be dialed (retried after dialRetry)
	dropSpoofedSource               // from a peer, with a source that is not the peer's address
	dropNotForUs                    // from a peer, to an address that is not this node's
	dropDeviceWrite                 // the device refused it
	dropDenied                      // from a peer, refused by this node's access rules (ICMP prohibited sent)
	dropBadFragment                 // from a peer, a fragment the rules cannot judge (fragment.go)
	numReasons
)

var reasonText = [numReasons]string{
	dropMalformed:     "malformed packet",
	dropNotUnicast:    "destination not unicast",
	dropSourceNotOurs: "source address not this node's",
	dropTooBig:        "packet larger than the tunnel MTU",
	dropNoRoute:       "no node holds the destination",
	dropQueueFull:     "peer queue full",
	dropConnLost:      "peer connection lost",
	dropNoConnection:  "peer unreachable",
	dropSpoofedSource: "source address not the sending peer's",
	dropNotForUs:      "destination not this node's",
	dropDeviceWrite:   "device refused the packet",
	dropDenied:        "denied by the access rules",
	dropBadFragment:   "fragment that cannot be judged",
}

func (r reason) String() string { return reasonText[r] }

// Drops counts the packets dropped, by reason, since the Network started.
type Drops struct {
	Malformed     uint64 `json:"malformed"`       // not a well-formed IP packet (either direction)
	NotUnicast    uint64 `json:"not_unicast"`     // from the device, to a multicast, broadcast or link-local address
	SourceNotOurs uint64 `json:"source_not_ours"` // from the device, with a source that is not this node's address
	TooBig        uint64 `json:"too_big"`         // larger than the tunnel MTU (an ICMP error went back) or, received, than the device's
	NoRoute       uint64 `json:"no_route"`        // no node holds the destination
	QueueFull     uint64 `json:"queue_full"`      // the peer's queue, or the wait for the destination's lookup, was full
	ConnLost      uint64 `json:"conn_lost"`       // queued or in flight when the peer's connection ended
	NoConnection  uint64 `json:"no_connection"`   // the peer could not be dialed
	SpoofedSource uint64 `json:"spoofed_source"`  // from a peer, with a source that is not that peer's address
	NotForUs      uint64 `json:"not_for_us"`      // from a peer, to an address that is not this node's
	DeviceWrite   uint64 `json:"device_write"`    // the device refused it
	Denied        uint64 `json:"denied"`          // from a peer, refused by this node's access rules (ICMP prohibited went back)
	BadFragment   uint64 `json:"bad_fragment"`    // from a peer, a fragment the rules cannot judge: a Fragment header behind another, a first fragment without its whole transport header
}

// PeerStats is the traffic with one peer since the Network started
// (counted across its connections), and the path it takes now. Plain
// data, JSON-friendly.
type PeerStats struct {
	ID        identity.ID `json:"id"`
	Connected bool        `json:"connected"` // a connection to send on is up
	// Method is how the connection sent on was set up (vconn's methods:
	// direct, reverse, splice, routed; direct for one that does not
	// say), Since when it is the one sent on; empty and zero when not
	// connected.
	Method   string    `json:"method,omitempty"`
	Since    time.Time `json:"since,omitzero"`
	Switches uint64    `json:"switches"` // times the connection sent on changed to another one
	Redials  uint64    `json:"redials"`  // attempts to dial it again after its connections all ended (redial.go)
	Replayed uint64    `json:"replayed"` // TCP segments written again on the connection that took over from one that ended (replay.go), in SentPackets too
	Conns    int       `json:"conns"`    // connections to it now (a replaced one lingers for connGrace)
	Carriers int       `json:"carriers"` // of them, the carriers flows are hashed onto beside the main one (carrier.go)
	// ShortcutTries counts the tries of a more direct path (ShortcutDialer)
	// and ShortcutError is the last one's failure, if it failed.
	ShortcutTries uint64 `json:"shortcut_tries,omitempty"`
	ShortcutError string `json:"shortcut_error,omitempty"`
	Queued        int    `json:"queued"` // packets waiting in its queue
	SentPackets   uint64 `json:"sent_packets"`
	SentBytes     uint64 `json:"sent_bytes"`
	RecvPackets   uint64 `json:"recv_packets"`
	RecvBytes     uint64 `json:"recv_bytes"`
	QueueFull     uint64 `json:"queue_full"` // dropped: its queue was full
	ConnLost      uint64 `json:"conn_lost"`  // dropped: queued or in flight when its connection ended
	Spoofed       uint64 `json:"spoofed"`    // dropped: it sent a source that is not its address
	Denied        uint64 `json:"denied"`     // dropped: this node's access rules refuse it
	TooBig        uint64 `json:"too_big"`    // dropped: larger than this node's device MTU
	Malformed     uint64 `json:"malformed"`  // dropped: not a well-formed IP packet
	NotForUs      uint64 `json:"not_for_us"` // dropped: to an address that is not this node's
	// Refused counts the ICMP administratively prohibited it sent: its
	// access rules refused this node's packets.
	Refused uint64 `json:"refused"`
}

// Stats is a Network's counters.
type Stats struct {
	MTU       int         `json:"mtu"`        // the tunnel MTU now
	DeviceMTU int         `json:"device_mtu"` // the device's, now
	Drops     Drops       `json:"drops"`
	Peers     []PeerStats `json:"peers"` // by ID
}

// counters are one peer's; they outlive its connections.
type counters struct {
	sentPackets, sentBytes, recvPackets, recvBytes atomic.Uint64
	queueFull, connLost, spoofed                   atomic.Uint64
	switches, denied, tooBig, malformed, notForUs  atomic.Uint64
	refused, redials, replayed                     atomic.Uint64
	icmpBack                                       *rate.Limiter // the ICMP errors sent back to it (admit.go)
	srcs                                           *sources      // which source addresses are its (source.go)
}

// Stats returns the Network's counters.
func (n *Network) Stats() Stats {
	s := Stats{MTU: n.MTU(), DeviceMTU: int(n.devMTU.Load())}
	d := &n.drops
	s.Drops = Drops{
		Malformed: d[dropMalformed].Load(), NotUnicast: d[dropNotUnicast].Load(),
		SourceNotOurs: d[dropSourceNotOurs].Load(), TooBig: d[dropTooBig].Load(),
		NoRoute: d[dropNoRoute].Load(), QueueFull: d[dropQueueFull].Load(),
		ConnLost: d[dropConnLost].Load(), NoConnection: d[dropNoConnection].Load(),
		SpoofedSource: d[dropSpoofedSource].Load(), NotForUs: d[dropNotForUs].Load(),
		DeviceWrite: d[dropDeviceWrite].Load(), Denied: d[dropDenied].Load(),
		BadFragment: d[dropBadFragment].Load(),
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, c := range n.counters {
		ps := PeerStats{
			ID:          id,
			SentPackets: c.sentPackets.Load(), SentBytes: c.sentBytes.Load(),
			RecvPackets: c.recvPackets.Load(), RecvBytes: c.recvBytes.Load(),
			QueueFull: c.queueFull.Load(), ConnLost: c.connLost.Load(), Spoofed: c.spoofed.Load(),
			Switches: c.switches.Load(), Redials: c.redials.Load(), Replayed: c.replayed.Load(), Denied: c.denied.Load(), TooBig: c.tooBig.Load(),
			Malformed: c.malformed.Load(), NotForUs: c.notForUs.Load(), Refused: c.refused.Load(),
		}
		if p := n.peers[id]; p != nil && !p.down {
			ps.Connected = p.conn != nil
			ps.Queued = len(p.queue)
			ps.Conns = len(p.links)
			ps.Carriers = len(p.carriers)
			if l := p.links[p.conn]; l != nil {
				ps.Method, ps.Since = string(l.method), p.since
			}
			ps.ShortcutTries, ps.ShortcutError = p.shortcut.tries, p.shortcut.lastErr
		}
		s.Peers = append(s.Peers, ps)
	}
	slices.SortFunc(s.Peers, func(a, b PeerStats) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	return s
}

// Peer returns the counters of the peer id (zero when it never had any).
func (s Stats) Peer(id identity.ID) PeerStats {
	for _, p := range s.Peers {
		if p.ID == id {
			return p
		}
	}
	return PeerStats{ID: id}
}
