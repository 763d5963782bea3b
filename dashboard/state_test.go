package dashboard

import (
	"testing"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/status"
)

// The map from several hubs' reports: each hub once (its own report over
// what others' routes say of it), each link once whichever end reported
// it, a link whose route is gone down, hubs known only from routes, nodes
// at their hubs and the user's marked.
func TestMerge(t *testing.T) {
	id := func(b byte) identity.ID { var i identity.ID; i[0] = b; return i }
	a := gridlink.HubStatus{Name: "a", ID: id(1),
		Routes: []status.Route{{Hub: id(2), Name: "b", Reachable: true, Hops: 1, LatencyMS: 5},
			{Hub: id(3), Name: "c", Reachable: true, Hops: 2, LatencyMS: 9, Nodes: 2},
			{Hub: id(4), Name: "d", Reachable: false, Hops: 16}},
		Links: []status.Link{{Peer: id(2), Name: "b", Role: "hub", RTTMS: 5}, {Peer: id(4), Name: "d", Role: "hub", RTTMS: 7},
			{Peer: id(9), Name: "n1", Role: "node"}},
		Nodes: []identity.Machine{{ID: id(9), Name: "n1"}}}
	b := gridlink.HubStatus{Name: "b", ID: id(2),
		Routes: []status.Route{{Hub: id(1), Name: "a", Reachable: true, Hops: 1, LatencyMS: 5}},
		Links:  []status.Link{{Peer: id(1), Name: "a", Role: "hub", RTTMS: 4.5}},
		Nodes:  []identity.Machine{{ID: id(8), Name: "me"}}}
	me := &status.Agent{Node: identity.Machine{ID: id(8), Name: "me", HubName: "b"}}
	o := merge([]gridlink.HubStatus{a, b}, me, nil)
	var names []string
	for _, h := range o.Hubs {
		names = append(names, h.Name)
	}
	if len(o.Hubs) != 4 || names[0] != "a" || names[3] != "d" {
		t.Fatalf("hubs %v", names)
	}
	if h := o.Hubs[2]; h.Reported || !h.Reachable || h.Hops != 2 || h.Nodes != 2 {
		t.Errorf("c, known from a's routes: %+v", h)
	}
	if h := o.Hubs[3]; h.Reachable {
		t.Errorf("d, unreachable: %+v", h)
	}
	if h := o.Hubs[1]; !h.Reported || h.Nodes != 1 {
		t.Errorf("b, reported: %+v", h)
	}
	if len(o.Links) != 2 || o.Links[0].A != "a" || o.Links[0].B != "b" || o.Links[0].State != "up" || o.Links[1].B != "d" || o.Links[1].State != "down" {
		t.Errorf("links %+v", o.Links)
	}
	if len(o.Nodes) != 2 || o.Nodes[0].Name != "me" || !o.Nodes[0].Self || o.Nodes[0].Hub != "b" || o.Nodes[1].Self {
		t.Errorf("nodes %+v", o.Nodes)
	}
	if o := merge(nil, me, []string{"x: no hub"}); len(o.Nodes) != 1 || o.Nodes[0].Hub != "b" || len(o.Errors) != 1 {
		t.Errorf("no hub read: %+v", o)
	}
}
