package hubserver

import (
	"time"

	"github.com/gridlink/gridlink/status"
)

// Status is what the hub reports on its status socket (gridlink status
// --hub): Routes, Links and Nodes in the shapes of package status.
func (h *Hub) Status() status.Hub {
	routes, links := h.Routes(), h.Links()
	st := status.Hub{Name: h.Name(), ID: h.ID(), Addr: h.Addr().String(), Nodes: h.Nodes(),
		Routes: make([]status.Route, 0, len(routes)), Links: make([]status.Link, 0, len(links))}
	for _, r := range routes {
		st.Routes = append(st.Routes, status.Route{Hub: r.Hub, Name: r.Name, Reachable: r.Reachable(), NextHop: r.NextHop, Hops: r.Hops,
			LatencyMS: ms(r.Latency), State: r.State, Addrs: r.Addrs, Nodes: r.Nodes})
	}
	for _, l := range links {
		st.Links = append(st.Links, status.Link{Peer: l.Peer, Name: l.Name, Role: l.Role, Remote: l.Remote, Dialed: l.Dialed,
			RTTMS: ms(l.RTT), Circuits: l.Circuits, QueuedBytes: l.Queued, Connections: l.Connections, Congestion: l.Congestion})
	}
	return st
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
