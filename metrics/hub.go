package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridlink/gridlink/status"
)

// Hub is a hub's collector: it reads Status and Counters at every scrape.
type Hub struct {
	Status   func() status.Hub         // routes, links, attached nodes (hubserver's Hub.Status)
	Counters func() status.HubCounters // hubserver's Hub.Counters
}

var (
	hubNodes       = desc("hub", "nodes", "Nodes attached to this hub.")
	hubLinks       = desc("hub", "links", "This hub's links, by role of the peer (hub, node).", "role")
	hubLinkRTT     = desc("hub", "link_rtt_seconds", "Round trip of this hub's link to a neighbouring hub (0 until measured).", "peer")
	hubLinkQueued  = desc("hub", "link_queued_bytes", "Bytes waiting to be written on this hub's link to a neighbouring hub.", "peer")
	hubCircuits    = desc("hub", "circuits", "Circuits open through this hub.")
	hubRoutes      = desc("hub", "routes", "Routes to other hubs, by state (reachable, unreachable).", "state")
	hubRouteUp     = desc("hub", "route_up", "1 while the route to a hub reaches it, else 0.", "hub")
	hubRouteHops   = desc("hub", "route_hops", "Hub links on the route to a hub (reachable routes only).", "hub")
	hubRouteRTT    = desc("hub", "route_latency_seconds", "Measured latency of the route to a hub (reachable routes only).", "hub")
	hubSwitched    = desc("hub", "switched_bytes_total", "Circuit payload bytes this hub passed on (routed traffic, once per hop through it).")
	hubOpened      = desc("hub", "circuits_opened_total", "Circuits this hub passed an open on for.")
	hubRefusals    = desc("hub", "refusals_total", "Connections and circuits this hub refused, by what and reason.", "what", "reason")
	hubLinkRoles   = []string{"hub", "node"}
	hubRouteStates = []string{"reachable", "unreachable"}
)

// Describe sends the hub's metric descriptions.
func (h *Hub) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{hubNodes, hubLinks, hubLinkRTT, hubLinkQueued, hubCircuits, hubRoutes, hubRouteUp, hubRouteHops, hubRouteRTT, hubSwitched, hubOpened, hubRefusals} {
		ch <- d
	}
}

// Collect reads the hub's status and counters and sends them.
func (h *Hub) Collect(ch chan<- prometheus.Metric) {
	st, c := h.Status(), h.Counters()
	ch <- prometheus.MustNewConstMetric(hubNodes, prometheus.GaugeValue, float64(len(st.Nodes)))
	links := map[string]int{}
	circuitEnds := 0
	seen := map[string]bool{}
	for _, l := range st.Links {
		links[l.Role]++
		circuitEnds += l.Circuits
		if l.Role != "hub" {
			continue // nodes are not labels
		}
		peer := hubName(l.Name, l.Peer.Short())
		if seen[peer] {
			continue // a second link to the same hub (one replacing another): the first speaks for it
		}
		seen[peer] = true
		ch <- prometheus.MustNewConstMetric(hubLinkRTT, prometheus.GaugeValue, l.RTTMS/1000, peer)
		ch <- prometheus.MustNewConstMetric(hubLinkQueued, prometheus.GaugeValue, float64(l.QueuedBytes), peer)
	}
	for _, role := range hubLinkRoles {
		ch <- prometheus.MustNewConstMetric(hubLinks, prometheus.GaugeValue, float64(links[role]), role)
	}
	// every circuit through the hub has an end on two of its links
	ch <- prometheus.MustNewConstMetric(hubCircuits, prometheus.GaugeValue, float64(circuitEnds/2))
	states := map[string]int{}
	seen = map[string]bool{}
	for _, r := range st.Routes {
		state := hubRouteStates[1]
		if r.Reachable {
			state = hubRouteStates[0]
		}
		states[state]++
		name := hubName(r.Name, r.Hub.Short())
		if seen[name] {
			continue
		}
		seen[name] = true
		ch <- prometheus.MustNewConstMetric(hubRouteUp, prometheus.GaugeValue, bool01(r.Reachable), name)
		if r.Reachable {
			ch <- prometheus.MustNewConstMetric(hubRouteHops, prometheus.GaugeValue, float64(r.Hops), name)
			ch <- prometheus.MustNewConstMetric(hubRouteRTT, prometheus.GaugeValue, r.LatencyMS/1000, name)
		}
	}
	for _, s := range hubRouteStates {
		ch <- prometheus.MustNewConstMetric(hubRoutes, prometheus.GaugeValue, float64(states[s]), s)
	}
	ch <- prometheus.MustNewConstMetric(hubSwitched, prometheus.CounterValue, float64(c.SwitchedBytes))
	ch <- prometheus.MustNewConstMetric(hubOpened, prometheus.CounterValue, float64(c.CircuitsOpened))
	for _, r := range c.Refusals {
		ch <- prometheus.MustNewConstMetric(hubRefusals, prometheus.CounterValue, float64(r.Count), r.What, r.Reason)
	}
}

// hubName is a hub's label: its name, or its short ID without one.
func hubName(name, short string) string {
	if name == "" {
		return short
	}
	return name
}
