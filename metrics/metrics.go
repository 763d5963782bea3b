// Package metrics exposes what nodes and hubs count to Prometheus: custom
// collectors (node.go, hub.go) that read the product's counters and
// status snapshots, in the shapes of package status, when scraped, and
// the /metrics endpoint that serves them with the Go runtime's and the
// process's metrics (serve.go). It counts nothing itself and links none
// of the overlay: the counting is vconn's and hubserver's (atomics where
// the bytes and setups happen), the wiring the API package's.
//
// Names follow Prometheus' conventions: the gridlink_ prefix, then node_
// or hub_; base units (seconds, bytes) in the name; counters end in
// _total. Labels have few values: path kind, method, outcome, reason,
// role, and on a hub the names of the grid's hubs. No node IDs, node
// names or addresses become labels.
package metrics

import "github.com/prometheus/client_golang/prometheus"

const namespace = "gridlink"

// desc is a metric's description in the gridlink namespace.
func desc(subsystem, name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, name), help, labels, nil)
}
