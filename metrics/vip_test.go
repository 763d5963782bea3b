package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gridlink/gridlink/status"
)

// The virtual network's counters (Node.VirtualCounters) give path kind
// "virtual" its bytes and connected peers, and series of its packets by
// direction and of its drops by reason, every reason listed.
func TestNodeCollectorVirtualCounters(t *testing.T) {
	n := &Node{Counters: func() status.NodeCounters {
		return status.NodeCounters{Paths: []status.PathBytes{{Path: status.PathDirect, SentBytes: 10}}}
	}, VirtualCounters: func() status.VIPCounters {
		return status.VIPCounters{SentPackets: 7, SentBytes: 7000, RecvPackets: 5, RecvBytes: 500, Connected: 2,
			Drops: status.VIPDrops{SpoofedPackets: 3, QueueFullPackets: 4, DeniedPackets: 1}}
	}}
	want := `
# HELP gridlink_node_sent_bytes_total Payload bytes written to the node's virtual connections, by path kind (direct, reverse, splice, routed; virtual: the virtual network).
# TYPE gridlink_node_sent_bytes_total counter
gridlink_node_sent_bytes_total{path="direct"} 10
gridlink_node_sent_bytes_total{path="virtual"} 7000
# HELP gridlink_node_received_bytes_total Payload bytes read from the node's virtual connections, by path kind.
# TYPE gridlink_node_received_bytes_total counter
gridlink_node_received_bytes_total{path="direct"} 0
gridlink_node_received_bytes_total{path="virtual"} 500
# HELP gridlink_node_connections Open virtual connections, by path kind.
# TYPE gridlink_node_connections gauge
gridlink_node_connections{path="direct"} 0
gridlink_node_connections{path="virtual"} 2
# HELP gridlink_node_vip_packets_total Packets the virtual IP network carried, by direction (sent: read from the device and written to a peer; received: from a peer, written to the device).
# TYPE gridlink_node_vip_packets_total counter
gridlink_node_vip_packets_total{direction="received"} 5
gridlink_node_vip_packets_total{direction="sent"} 7
# HELP gridlink_node_vip_dropped_packets_total Packets the virtual IP network dropped, by reason (malformed, not_unicast, source_not_ours, too_big, no_route, queue_full, conn_lost, no_connection, spoofed, not_for_us, device_write, denied, bad_fragment).
# TYPE gridlink_node_vip_dropped_packets_total counter
gridlink_node_vip_dropped_packets_total{reason="bad_fragment"} 0
gridlink_node_vip_dropped_packets_total{reason="conn_lost"} 0
gridlink_node_vip_dropped_packets_total{reason="denied"} 1
gridlink_node_vip_dropped_packets_total{reason="device_write"} 0
gridlink_node_vip_dropped_packets_total{reason="malformed"} 0
gridlink_node_vip_dropped_packets_total{reason="no_connection"} 0
gridlink_node_vip_dropped_packets_total{reason="no_route"} 0
gridlink_node_vip_dropped_packets_total{reason="not_for_us"} 0
gridlink_node_vip_dropped_packets_total{reason="not_unicast"} 0
gridlink_node_vip_dropped_packets_total{reason="queue_full"} 4
gridlink_node_vip_dropped_packets_total{reason="source_not_ours"} 0
gridlink_node_vip_dropped_packets_total{reason="spoofed"} 3
gridlink_node_vip_dropped_packets_total{reason="too_big"} 0
`
	if err := testutil.CollectAndCompare(n, strings.NewReader(want), "gridlink_node_sent_bytes_total", "gridlink_node_received_bytes_total",
		"gridlink_node_connections", "gridlink_node_vip_packets_total", "gridlink_node_vip_dropped_packets_total"); err != nil {
		t.Error(err)
	}
	// Without the virtual network, none of its series.
	n.VirtualCounters = nil
	if got := testutil.CollectAndCount(n, "gridlink_node_vip_packets_total", "gridlink_node_vip_dropped_packets_total"); got != 0 {
		t.Errorf("%d virtual network series without one", got)
	}
}
