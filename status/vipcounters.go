package status

// VIPCounters is what a node's virtual IP network counted since it
// started (package vip's Stats, summed over its peers): packets and
// bytes each way, the peers it has a connection to send on now, and the
// packets it dropped, by reason. metrics.Node.VirtualCounters reads it.
type VIPCounters struct {
	SentPackets uint64   `json:"sent_packets"` // read from the device, written to a peer
	SentBytes   uint64   `json:"sent_bytes"`
	RecvPackets uint64   `json:"recv_packets"` // from a peer, written to the device
	RecvBytes   uint64   `json:"recv_bytes"`
	Connected   int      `json:"connected"` // peers with a connection to send on
	Drops       VIPDrops `json:"drops"`
}

// Reasons the virtual network drops a packet (VIPDropCount.Reason), one
// per VIPDrops field, named as its JSON name without "_packets".
const (
	VIPDropMalformed     = "malformed"
	VIPDropNotUnicast    = "not_unicast"
	VIPDropSourceNotOurs = "source_not_ours"
	VIPDropTooBig        = "too_big"
	VIPDropNoRoute       = "no_route"
	VIPDropQueueFull     = "queue_full"
	VIPDropConnLost      = "conn_lost"
	VIPDropNoConnection  = "no_connection"
	VIPDropSpoofed       = "spoofed"
	VIPDropNotForUs      = "not_for_us"
	VIPDropDeviceWrite   = "device_write"
	VIPDropDenied        = "denied"
	VIPDropBadFragment   = "bad_fragment"
)

// VIPDropCount is the packets dropped for one reason.
type VIPDropCount struct {
	Reason  string `json:"reason"`
	Packets uint64 `json:"packets"`
}

// ByReason lists d's counts, one per reason (zero counts included), in
// the order of its fields.
func (d VIPDrops) ByReason() []VIPDropCount {
	return []VIPDropCount{
		{VIPDropMalformed, d.MalformedPackets},
		{VIPDropNotUnicast, d.NotUnicastPackets},
		{VIPDropSourceNotOurs, d.SourceNotOursPackets},
		{VIPDropTooBig, d.TooBigPackets},
		{VIPDropNoRoute, d.NoRoutePackets},
		{VIPDropQueueFull, d.QueueFullPackets},
		{VIPDropConnLost, d.ConnLostPackets},
		{VIPDropNoConnection, d.NoConnectionPackets},
		{VIPDropSpoofed, d.SpoofedPackets},
		{VIPDropNotForUs, d.NotForUsPackets},
		{VIPDropDeviceWrite, d.DeviceWritePackets},
		{VIPDropDenied, d.DeniedPackets},
		{VIPDropBadFragment, d.BadFragmentPackets},
	}
}
