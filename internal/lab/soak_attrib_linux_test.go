package lab_test

import (
	"context"
	"slices"
	"testing"
	"time"
)

// Issue 35: which chaos explains a soak failure. A failure is explained
// only by an event on its operation's path in the operation's time (and
// chaosGrace after the event's end), never by chaos elsewhere: with "any
// event in its time" a long flow's failure was always explained.
//
// An operation's path is its two endpoints (node agents, by host name)
// and the sites whose hubs and wide-area links it may cross. The soak
// does not record each operation's actual route (that would take a hub
// status per hop per operation); it uses a sound over-approximation that
// is still per path:
//
//   - the endpoints' sites, whose hubs the endpoints are attached to and
//     whose wide-area link a direct or relayed connection crosses;
//   - every site, when the endpoints' sites' hubs were not neighbours
//     when the soak started (their route transits a third hub; the
//     start's hop counts say which pairs, routed[pair]);
//   - every site, when an endpoint's home hub was killed by an event that
//     ended less than homeWait before the operation began, or during it:
//     the endpoint's agent may be at its fallback (another site's) hub
//     until it returns home.
//
// A direct link between the endpoints' sites, when cut, makes the hubs
// route through a third site; that cut is itself on the path, so the
// failure is explained without widening the path further.

// chaosTouch is what a chaos event touches.
type chaosTouch struct {
	hubs  []string    // sites whose hub it kills
	nodes []string    // node agents (host names) it stops
	wan   [][2]string // site pairs whose wide-area traffic it drops (all or a share)
}

// cuts says whether the event drops traffic between sites a and b.
func (c chaosTouch) cuts(a, b string) bool {
	for _, p := range c.wan {
		if (p[0] == a && p[1] == b) || (p[0] == b && p[1] == a) {
			return true
		}
	}
	return false
}

// opPath is an operation's endpoints: node agents by host name, and
// their sites.
type opPath struct {
	nodes []string
	sites []string
}

// pathModel is what the soak knows of grid6's routes.
type pathModel struct {
	sites  []string           // every site
	routed map[[2]string]bool // site pairs whose hubs were not neighbours at the start (either order)
}

// inTime says whether ev (and its grace after) overlaps [from, until].
func (ev chaosEvent) inTime(from, until time.Time) bool {
	return ev.from.Before(until) && ev.until.Add(chaosGrace).After(from)
}

// reach is the sites p's traffic may cross in [from, until], as the
// package comment above says.
func (m pathModel) reach(p opPath, events []chaosEvent, from, until time.Time) []string {
	for i, a := range p.sites {
		for _, b := range p.sites[i+1:] {
			if m.routed[[2]string{a, b}] || m.routed[[2]string{b, a}] {
				return m.sites
			}
		}
	}
	for _, ev := range events {
		if ev.from.Before(until) && ev.until.Add(homeWait).After(from) {
			for _, s := range p.sites {
				if slices.Contains(ev.touch.hubs, s) {
					return m.sites
				}
			}
		}
	}
	return p.sites
}

// onPath says whether ev touches a path of endpoints nodes crossing
// sites.
func (ev chaosEvent) onPath(nodes, sites []string) bool {
	for _, n := range ev.touch.nodes {
		if slices.Contains(nodes, n) {
			return true
		}
	}
	for _, s := range ev.touch.hubs {
		if slices.Contains(sites, s) {
			return true
		}
	}
	for i, a := range sites {
		for _, b := range sites[i+1:] {
			if ev.touch.cuts(a, b) {
				return true
			}
		}
	}
	return false
}

// explaining are the events that explain a failure of an operation on
// path p that ran in [from, until].
func (m pathModel) explaining(p opPath, events []chaosEvent, from, until time.Time) []chaosEvent {
	sites := m.reach(p, events, from, until)
	var out []chaosEvent
	for _, ev := range events {
		if ev.inTime(from, until) && ev.onPath(p.nodes, sites) {
			out = append(out, ev)
		}
	}
	return out
}

// routes is the soak's path model: every site, and the pairs of sites
// whose hubs are not neighbours now (a route between them transits a
// third hub). A hub whose status cannot be read counts as a neighbour
// of none.
func (S *soak) routes(ctx context.Context) pathModel {
	m := pathModel{routed: map[[2]string]bool{}}
	for _, s := range S.topo.Sites {
		m.sites = append(m.sites, s.Name)
	}
	for _, s := range S.topo.Sites {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		hops, err := S.o.HubHops(cctx, hubHostOf(s))
		cancel()
		if err != nil {
			S.t.Logf("hub %s's routes: %v (its pairs count as routed)", s.Name, err)
		}
		for _, o := range S.topo.Sites {
			if o != s && hops[o.Name] != 1 {
				m.routed[[2]string{s.Name, o.Name}] = true
			}
		}
	}
	S.t.Logf("site pairs whose hubs are not neighbours: %v", m.routed)
	return m
}

// path is the path of an operation between the node agents of hosts.
func (S *soak) path(hosts ...string) opPath {
	var p opPath
	for _, n := range hosts {
		h := S.host(n)
		p.nodes = append(p.nodes, h.ID())
		if !slices.Contains(p.sites, h.Site.Name) {
			p.sites = append(p.sites, h.Site.Name)
		}
	}
	return p
}

// TestSoakAttribution: a failure is explained by chaos on its path in
// its time only.
func TestSoakAttribution(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ev := func(name string, from, until int, touch chaosTouch) chaosEvent {
		return chaosEvent{kind: name, from: at(from), until: at(until), touch: touch}
	}
	sites := []string{"das3v", "das3d", "rockstar", "g5k", "hiroshi", "desktop"}
	m := pathModel{sites: sites, routed: map[[2]string]bool{{"hiroshi", "g5k"}: true}}
	// das3d-n1 to rockstar-n1, from +100 s to +110 s
	direct := opPath{nodes: []string{"das3d-n1", "rockstar-n1"}, sites: []string{"das3d", "rockstar"}}
	// hiroshi-n1 to g5k-n1: their hubs are not neighbours
	routed := opPath{nodes: []string{"hiroshi-n1", "g5k-n1"}, sites: []string{"hiroshi", "g5k"}}
	cases := []struct {
		name string
		p    opPath
		ev   chaosEvent
		want bool
	}{
		{"hub killed at another site", direct, ev("hub", 95, 105, chaosTouch{hubs: []string{"g5k"}}), false},
		{"the source's hub killed", direct, ev("hub", 95, 105, chaosTouch{hubs: []string{"das3d"}}), true},
		{"the destination's hub killed", direct, ev("hub", 95, 105, chaosTouch{hubs: []string{"rockstar"}}), true},
		{"wide-area path between the endpoints' sites down", direct, ev("flap", 102, 104, chaosTouch{wan: [][2]string{{"rockstar", "das3d"}}}), true},
		{"wide-area path between other sites down", direct, ev("flap", 102, 104, chaosTouch{wan: [][2]string{{"das3d", "g5k"}}}), false},
		{"the endpoints' path down long before", direct, ev("flap", 10, 20, chaosTouch{wan: [][2]string{{"das3d", "rockstar"}}}), false},
		{"the endpoints' path down, its grace overlapping", direct, ev("flap", 70, 75, chaosTouch{wan: [][2]string{{"das3d", "rockstar"}}}), true},
		{"the endpoints' path down after the operation", direct, ev("flap", 111, 120, chaosTouch{wan: [][2]string{{"das3d", "rockstar"}}}), false},
		{"a partition separating the endpoints", direct, ev("partition", 90, 105, chaosTouch{wan: [][2]string{{"das3d", "g5k"}, {"das3d", "rockstar"}}}), true},
		{"a partition with both endpoints on one side", direct, ev("partition", 90, 105, chaosTouch{wan: [][2]string{{"das3d", "g5k"}, {"rockstar", "g5k"}}}), false},
		{"an endpoint's node agent stopped", direct, ev("node", 100, 105, chaosTouch{nodes: []string{"rockstar-n1"}}), true},
		{"another node agent stopped", direct, ev("node", 100, 105, chaosTouch{nodes: []string{"rockstar-n2"}}), false},
		{"a transit site's hub killed, routed pair", routed, ev("hub", 95, 105, chaosTouch{hubs: []string{"das3v"}}), true},
		{"the same hub killed, direct pair", direct, ev("hub", 95, 105, chaosTouch{hubs: []string{"das3v"}}), false},
	}
	for _, c := range cases {
		got := len(m.explaining(c.p, []chaosEvent{c.ev}, at(100), at(110))) > 0
		if got != c.want {
			t.Errorf("%s: explained %v, want %v", c.name, got, c.want)
		}
	}
	// an endpoint's home hub killed before the operation: its agent may
	// be at another site's hub, whose kill then explains the failure
	away := []chaosEvent{
		ev("hub", 40, 45, chaosTouch{hubs: []string{"das3d"}}),
		ev("hub", 100, 104, chaosTouch{hubs: []string{"g5k"}}),
	}
	if got := m.explaining(direct, away, at(100), at(110)); len(got) != 1 || got[0].touch.hubs[0] != "g5k" {
		t.Errorf("hub at g5k killed while das3d's nodes may be away from home: explained by %v, want the g5k kill", got)
	}
	if got := m.explaining(direct, away[1:], at(100), at(110)); len(got) != 0 {
		t.Errorf("hub at g5k killed, das3d's nodes at home: explained by %v, want none", got)
	}
}

// TestSoakStallsByKind: a vip stall counts for the kinds of chaos on its
// path in its time, and for "" when there is none.
func TestSoakStallsByKind(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	m := pathModel{sites: []string{"das3d", "g5k", "hiroshi"}}
	flow := opPath{nodes: []string{"hiroshi-n1", "das3d-n1"}, sites: []string{"hiroshi", "das3d"}}
	events := []chaosEvent{
		{kind: "hub killed", from: at(10), until: at(15), touch: chaosTouch{hubs: []string{"das3d"}}},
		{kind: "loss burst", from: at(200), until: at(215), touch: chaosTouch{wan: [][2]string{{"g5k", "das3d"}, {"g5k", "hiroshi"}}}},
	}
	stalls := []stall{
		{flow, at(11), at(14)},   // 3 s in the hub's kill
		{flow, at(12), at(20)},   // 8 s in it
		{flow, at(201), at(203)}, // 2 s in a loss burst off its path
	}
	got := m.longestStalls(stalls, events)
	want := map[string]time.Duration{"hub killed": 8 * time.Second, "": 2 * time.Second}
	if len(got) != len(want) || got["hub killed"] != want["hub killed"] || got[""] != want[""] {
		t.Errorf("longest stalls by kind %v, want %v", got, want)
	}
}
