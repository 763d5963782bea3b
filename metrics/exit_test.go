package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gridlink/gridlink/status"
)

// The exit service's counters (Node.ExitCounters) as series: exits
// opened and failed, refusals by reason, bytes by direction; none
// without an exit service.
func TestNodeCollectorExitCounters(t *testing.T) {
	n := &Node{Counters: func() status.NodeCounters { return status.NodeCounters{} }, ExitCounters: func() status.ExitCounters {
		return status.ExitCounters{Opened: 3, Failed: 1, SentBytes: 100, ReceivedBytes: 2000, Refused: []status.ExitRefusal{
			{Reason: status.ExitRefusedLoopback, Count: 2}, {Reason: status.ExitRefusedPrivate, Count: 5}}}
	}}
	want := `
# HELP gridlink_node_exits_opened_total Exits this node's exit service opened for members (the destination connected).
# TYPE gridlink_node_exits_opened_total counter
gridlink_node_exits_opened_total 3
# HELP gridlink_node_exits_failed_total Exits whose destination could not be resolved or connected.
# TYPE gridlink_node_exits_failed_total counter
gridlink_node_exits_failed_total 1
# HELP gridlink_node_exits_refused_total Exits refused, by reason (bad_request, loopback, link_local, unspecified, multicast, broadcast, own_address, private, port, per_member).
# TYPE gridlink_node_exits_refused_total counter
gridlink_node_exits_refused_total{reason="loopback"} 2
gridlink_node_exits_refused_total{reason="private"} 5
# HELP gridlink_node_exit_bytes_total Bytes exits carried, by direction (sent: from members to their destinations; received: back), added as each exit ends.
# TYPE gridlink_node_exit_bytes_total counter
gridlink_node_exit_bytes_total{direction="received"} 2000
gridlink_node_exit_bytes_total{direction="sent"} 100
`
	names := []string{"gridlink_node_exits_opened_total", "gridlink_node_exits_failed_total", "gridlink_node_exits_refused_total", "gridlink_node_exit_bytes_total"}
	if err := testutil.CollectAndCompare(n, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	n.ExitCounters = nil
	if got := testutil.CollectAndCount(n, names...); got != 0 {
		t.Errorf("%d exit series without an exit service", got)
	}
}
