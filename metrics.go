package gridlink

// Prometheus metrics of hubs and node agents (HubConfig.Metrics,
// AgentConfig.Metrics): package metrics' collectors over the counters of
// hubserver and vconn, served on /metrics.

import (
	"net"

	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/metrics"
	"github.com/gridlink/gridlink/vconn"
)

// DefaultMetricsHost is where a metrics address without a host binds
// (--metrics :9466): loopback, so that the endpoint, which answers
// whoever reaches it, stays on this host unless an address says
// otherwise.
const DefaultMetricsHost = metrics.DefaultHost

// nodeMetrics is the collector of n's metrics.
func nodeMetrics(n *vconn.Node) *metrics.Node {
	return &metrics.Node{Counters: n.Counters, Attached: func() bool { return n.Attached() == nil }}
}

// hubMetrics is the collector of h's metrics.
func hubMetrics(h *hubserver.Hub) *metrics.Hub {
	return &metrics.Hub{Status: h.Status, Counters: h.Counters}
}

// MetricsAddr is where the hub serves /metrics (HubConfig.Metrics); nil
// without.
func (h *Hub) MetricsAddr() net.Addr {
	if h.metrics == nil {
		return nil
	}
	return h.metrics.Addr()
}

// MetricsAddr is where the agent serves /metrics (AgentConfig.Metrics);
// nil without.
func (a *Agent) MetricsAddr() net.Addr {
	if a.metrics == nil {
		return nil
	}
	return a.metrics.Addr()
}
