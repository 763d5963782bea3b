package hubserver

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/status"
)

// A hub's report (gridlink status --hub) carries its routes and links in
// the status schema: reachability, hops and latency in milliseconds,
// links with their role, direction and round trip, and its nodes; and it
// reads back as it was written.
func TestStatusReport(t *testing.T) {
	g := newGrid(t)
	a := g.hub("a")
	b := g.hub("b", "a")
	g.node("nb", "b")
	testwait.Until(t, "b's route to a, and its node", 10*time.Second, func() bool {
		r, ok := b.route(a)
		return ok && r.Reachable() && r.Latency > 0 && len(b.Nodes()) == 1
	})
	st := b.Status()
	if st.Name != "b" || st.ID != b.ID() || st.Addr != b.Addr().String() || len(st.Nodes) != 1 || st.Nodes[0].Name != "nb" {
		t.Fatalf("b's report: %+v", st)
	}
	if len(st.Routes) != 1 {
		t.Fatalf("b's routes: %+v", st.Routes)
	}
	r := st.Routes[0]
	if r.Hub != a.ID() || r.Name != "a" || !r.Reachable || r.NextHop != a.ID() || r.Hops != 1 || r.LatencyMS <= 0 || r.LatencyMS > 1000 || len(r.Addrs) != 1 {
		t.Errorf("b's route to a: %+v", r)
	}
	var hubLink, nodeLink *status.Link
	for i, l := range st.Links {
		switch l.Role {
		case "hub":
			hubLink = &st.Links[i]
		case "node":
			nodeLink = &st.Links[i]
		}
	}
	if hubLink == nil || hubLink.Peer != a.ID() || hubLink.Name != "a" || !hubLink.Dialed || !hubLink.Remote.IsValid() {
		t.Errorf("b's link to a: %+v", hubLink)
	}
	if nodeLink == nil || nodeLink.Name != "nb" || nodeLink.Dialed {
		t.Errorf("b's link to its node: %+v", nodeLink)
	}
	b1, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back status.Hub
	if err := json.Unmarshal(b1, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, st) {
		t.Errorf("the report does not read back as written:\n%s\n%+v\n%+v", b1, st, back)
	}
}
