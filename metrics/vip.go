package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridlink/gridlink/status"
)

// The virtual IP network's series (Node.VirtualCounters): its bytes and
// connected peers as path kind "virtual" of the node's byte and
// connection series, and its packets and drops.
var (
	vipPackets = desc("node", "vip_packets_total", "Packets the virtual IP network carried, by direction (sent: read from the device and written to a peer; received: from a peer, written to the device).", "direction")
	vipDropped = desc("node", "vip_dropped_packets_total", "Packets the virtual IP network dropped, by reason (malformed, not_unicast, source_not_ours, too_big, no_route, queue_full, conn_lost, no_connection, spoofed, not_for_us, device_write, denied, bad_fragment).", "reason")
)

// virtualPath is the virtual network's counters as a path kind's bytes.
func virtualPath(v status.VIPCounters) status.PathBytes {
	return status.PathBytes{Path: status.PathVirtual, SentBytes: v.SentBytes, ReceivedBytes: v.RecvBytes, Open: v.Connected}
}

// collectVIP sends the virtual network's packets and drops.
func collectVIP(ch chan<- prometheus.Metric, v status.VIPCounters) {
	ch <- prometheus.MustNewConstMetric(vipPackets, prometheus.CounterValue, float64(v.SentPackets), "sent")
	ch <- prometheus.MustNewConstMetric(vipPackets, prometheus.CounterValue, float64(v.RecvPackets), "received")
	for _, d := range v.Drops.ByReason() {
		ch <- prometheus.MustNewConstMetric(vipDropped, prometheus.CounterValue, float64(d.Packets), d.Reason)
	}
}
