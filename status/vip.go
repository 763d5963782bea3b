package status

import "github.com/gridlink/gridlink/identity"

// VIP is a node's side of the virtual IP network (`gridlink node --vip`),
// in Agent.VIP while the node runs one.
type VIP struct {
	Device string `json:"device"` // the TUN device
	// Addrs are the node's virtual addresses with their prefix length
	// (100.97.3.4/12, fd67:726c::1:2/32), IPv4 first.
	Addrs    []string `json:"addrs"`
	MTUBytes int      `json:"mtu_bytes"` // the tunnel MTU
	// Claim is empty while the hubs give the node every address it
	// claimed, else why not (the refusal, naming the holder).
	Claim string    `json:"claim,omitempty"`
	Peers []VIPPeer `json:"peers"` // by ID
	Drops VIPDrops  `json:"drops"`
	// Names is where the node serves the network's names; nil: it
	// does not.
	Names *VIPNames `json:"names,omitempty"`
	// Rules are the node's access rules in their text form, an entry a
	// line; empty: every member reaches everything.
	Rules string `json:"rules,omitempty"`
}

// VIPNames is a node's name server of the virtual network.
type VIPNames struct {
	Zone   string `json:"zone"`   // NODE.ZONE, without the final dot
	Server string `json:"server"` // where it listens, ADDR:PORT (UDP and TCP)
	// Resolver is how the host's resolver is pointed at it: netns,
	// resolv.conf, systemd-resolved, or none (left alone).
	Resolver string `json:"resolver"`
}

// VIPPeer is the traffic with one virtual peer since the node started.
type VIPPeer struct {
	ID   identity.ID `json:"id"`
	Name string      `json:"name,omitempty"`
	// Addrs are its virtual addresses, as the directory named them.
	Addrs []string `json:"addrs"`
	// Path is the connection method (direct, reverse, splice, routed) of
	// the most direct of its open packet connections, the one the path
	// sends on once a shortcut is up; empty: none open. Paths lists every
	// open one's.
	Path             string   `json:"path"`
	Paths            []string `json:"paths,omitempty"`
	Connected        bool     `json:"connected"` // a connection to send on is up
	QueuedPackets    int      `json:"queued_packets"`
	SentPackets      uint64   `json:"sent_packets"`
	SentBytes        uint64   `json:"sent_bytes"`
	RecvPackets      uint64   `json:"recv_packets"`
	RecvBytes        uint64   `json:"recv_bytes"`
	QueueFullPackets uint64   `json:"queue_full_packets"` // dropped: its queue was full
	ConnLostPackets  uint64   `json:"conn_lost_packets"`  // dropped: queued or in flight when its connection ended
	SpoofedPackets   uint64   `json:"spoofed_packets"`    // dropped: sent from an address not its own
	DeniedPackets    uint64   `json:"denied_packets"`     // dropped: this node's access rules refuse them (ICMP prohibited went back)
	RefusedPackets   uint64   `json:"refused_packets"`    // ICMP prohibited it sent: its access rules refused this node's packets
	Switches         uint64   `json:"path_switches"`      // times the connection sent on changed (a shortcut replacing the routed one, say)
	Redials          uint64   `json:"redials,omitempty"`  // dials again after its connections all ended (a hub on the path died), its packets queued meanwhile
}

// VIPDrops counts the packets the node's virtual network dropped, by
// reason, since it started.
type VIPDrops struct {
	MalformedPackets     uint64 `json:"malformed_packets"`       // not a well-formed IP packet
	NotUnicastPackets    uint64 `json:"not_unicast_packets"`     // from the device, to a multicast, broadcast or link-local address
	SourceNotOursPackets uint64 `json:"source_not_ours_packets"` // from the device, from an address not the node's
	TooBigPackets        uint64 `json:"too_big_packets"`         // larger than the tunnel MTU (an ICMP error went back)
	NoRoutePackets       uint64 `json:"no_route_packets"`        // no node holds the destination
	QueueFullPackets     uint64 `json:"queue_full_packets"`      // a peer's queue was full
	ConnLostPackets      uint64 `json:"conn_lost_packets"`       // queued or in flight when a peer's connection ended
	NoConnectionPackets  uint64 `json:"no_connection_packets"`   // the peer could not be reached
	SpoofedPackets       uint64 `json:"spoofed_packets"`         // from a peer, from an address not its own
	NotForUsPackets      uint64 `json:"not_for_us_packets"`      // from a peer, to an address not the node's
	DeviceWritePackets   uint64 `json:"device_write_packets"`    // the device refused them
	DeniedPackets        uint64 `json:"denied_packets"`          // from a peer, refused by this node's access rules (ICMP prohibited went back)
	BadFragmentPackets   uint64 `json:"bad_fragment_packets"`    // from a peer, fragments the access rules cannot judge (nested, or a first one without its transport header)
}
