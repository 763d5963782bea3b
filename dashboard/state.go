package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/status"
)

// State is everything the page shows, as GET /api/state answers it and
// each server-sent event carries it.
type State struct {
	Time time.Time `json:"time"`
	// Agent is the user's agent's status (its connections with their
	// bytes, its virtual network's peers and paths); AgentError why it
	// could not be read (the agent's own refusal words, when it refused).
	Agent      *status.Agent `json:"agent,omitempty"`
	AgentError string        `json:"agent_error,omitempty"`
	// Throughput is the rate of the agent's connections, by local and
	// remote end (rates.go).
	Throughput []ConnRate     `json:"throughput"`
	Overlay    Overlay        `json:"overlay"`
	Transfers  []TransferView `json:"transfers"`
}

// Overlay is the map: hubs, the links between them, and nodes at their
// hubs, merged from every hub status socket read (Config.Hubs).
type Overlay struct {
	Hubs  []HubView  `json:"hubs"`
	Links []LinkView `json:"links"`
	Nodes []NodeView `json:"nodes"`
	// Errors say which hub status sockets could not be read, and why.
	Errors []string `json:"errors,omitempty"`
}

// HubView is a hub on the map.
type HubView struct {
	Name string `json:"name"`
	ID   string `json:"id"`
	// Reported: its own status was read; else it is known from another
	// hub's routes.
	Reported  bool    `json:"reported"`
	Reachable bool    `json:"reachable"`
	Hops      int     `json:"hops"`       // from the nearest hub that reported (0: itself)
	LatencyMS float64 `json:"latency_ms"` // the route's, from there
	Nodes     int     `json:"nodes"`      // attached nodes
}

// LinkView is a link between two hubs, as one of them reported it.
type LinkView struct {
	A           string  `json:"a"` // the reporting hub
	B           string  `json:"b"` // the hub at the other end
	RTTMS       float64 `json:"rtt_ms"`
	State       string  `json:"state"` // "up"; "down" when the route over it is gone
	Circuits    int     `json:"circuits"`
	QueuedBytes int     `json:"queued_bytes"`
}

// NodeView is a node at its hub.
type NodeView struct {
	Name string `json:"name"`
	ID   string `json:"id"`
	Hub  string `json:"hub"`
	Self bool   `json:"self,omitempty"` // the user's agent's node
}

// stateTimeout bounds reading the agent's and hubs' status for a state.
const stateTimeout = 3 * time.Second

// state reads the agent and the hubs (at once) and the transfers.
func (s *Server) state(ctx context.Context) State {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	st := State{Time: time.Now().UTC()}
	hubs := make([]gridlink.HubStatus, len(s.cfg.Hubs))
	errs := make([]error, len(s.cfg.Hubs))
	var wg sync.WaitGroup
	for i, sock := range s.cfg.Hubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hubs[i], errs[i] = gridlink.QueryHub(ctx, sock)
		}()
	}
	a, err := s.agent.Status(ctx)
	if err != nil {
		st.AgentError = err.Error()
		st.Throughput = []ConnRate{}
	} else {
		st.Agent = a
		st.Throughput = s.rates.observe(time.Now(), a.Conns) // when the counters were read
	}
	wg.Wait()
	var read []gridlink.HubStatus
	for i, err := range errs {
		if err != nil {
			st.Overlay.Errors = append(st.Overlay.Errors, fmt.Sprintf("%s: %v", s.cfg.Hubs[i], err))
			continue
		}
		read = append(read, hubs[i])
	}
	st.Overlay = merge(read, st.Agent, st.Overlay.Errors)
	st.Transfers = s.xfers.list(time.Now())
	return st
}

// merge makes the map from the hubs' reports (and the agent's node).
func merge(reports []gridlink.HubStatus, agent *status.Agent, errs []string) Overlay {
	o := Overlay{Errors: errs, Hubs: []HubView{}, Links: []LinkView{}, Nodes: []NodeView{}}
	hubs := map[string]*HubView{}
	for _, r := range reports {
		hubs[r.Name] = &HubView{Name: r.Name, ID: r.ID.String(), Reported: true, Reachable: true, Nodes: len(r.Nodes)}
	}
	for _, r := range reports {
		for _, rt := range r.Routes {
			h := hubs[rt.Name]
			switch {
			case h == nil:
				h = &HubView{Name: rt.Name, ID: rt.Hub.String(), Reachable: rt.Reachable, Hops: rt.Hops, LatencyMS: rt.LatencyMS, Nodes: rt.Nodes}
				hubs[rt.Name] = h
			case !h.Reported && rt.Reachable && (!h.Reachable || rt.Hops < h.Hops):
				h.Reachable, h.Hops, h.LatencyMS, h.Nodes = true, rt.Hops, rt.LatencyMS, rt.Nodes
			}
		}
	}
	seen := map[[2]string]bool{}
	for _, r := range reports {
		reach := map[string]bool{}
		for _, rt := range r.Routes {
			reach[rt.Name] = rt.Reachable
		}
		for _, l := range r.Links {
			if l.Role != "hub" {
				continue
			}
			key := [2]string{min(r.Name, l.Name), max(r.Name, l.Name)}
			if seen[key] {
				continue
			}
			seen[key] = true
			state := "up"
			if ok, known := reach[l.Name]; known && !ok {
				state = "down"
			}
			o.Links = append(o.Links, LinkView{A: r.Name, B: l.Name, RTTMS: l.RTTMS, State: state, Circuits: l.Circuits, QueuedBytes: l.QueuedBytes})
			if hubs[l.Name] == nil {
				hubs[l.Name] = &HubView{Name: l.Name, ID: l.Peer.String(), Reachable: true, Hops: 1, LatencyMS: l.RTTMS}
			}
		}
		for _, n := range r.Nodes {
			o.Nodes = append(o.Nodes, NodeView{Name: n.Name, ID: n.ID.String(), Hub: r.Name})
		}
	}
	if agent != nil {
		found := false
		for i := range o.Nodes {
			if o.Nodes[i].ID == agent.Node.ID.String() {
				o.Nodes[i].Self, found = true, true
			}
		}
		if !found && agent.Node.HubName != "" {
			o.Nodes = append(o.Nodes, NodeView{Name: agent.Node.Name, ID: agent.Node.ID.String(), Hub: agent.Node.HubName, Self: true})
		}
	}
	for _, h := range hubs {
		o.Hubs = append(o.Hubs, *h)
	}
	sort.Slice(o.Hubs, func(i, j int) bool { return o.Hubs[i].Name < o.Hubs[j].Name })
	sort.Slice(o.Links, func(i, j int) bool {
		if o.Links[i].A != o.Links[j].A {
			return o.Links[i].A < o.Links[j].A
		}
		return o.Links[i].B < o.Links[j].B
	})
	sort.Slice(o.Nodes, func(i, j int) bool { return o.Nodes[i].Name < o.Nodes[j].Name })
	return o
}

// eventOf is st as a server-sent event.
func eventOf(st State) ([]byte, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	return append(append([]byte("event: state\ndata: "), b...), "\n\n"...), nil
}
