package hubserver

import (
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// Routing is DSDV (destination-sequenced distance vector), the
// SmartSockets gossip made precise. Between hubs of wire.VersionDelta or
// later (wire/delta.go) an idle overlay sends no tables:
//
//   - every hub originates even state numbers for itself (starting from
//     the clock, so a restarted hub's are newer); they advance only when
//     the hub hears that another lost it with a number as new as its own;
//   - a hub sends each neighbour its whole table when their trunk comes
//     up: for every hub it knows, the state number, hop count,
//     accumulated latency, name, listen addresses, node count and protocol
//     version; from then on, every Interval and soon after a hub becomes
//     reachable or unreachable, only the entries that changed since it
//     last sent them to that neighbour. A next hop that changes between
//     two working routes waits for the next Interval: on a mesh of sites
//     at similar distances a hub's newer state number reaches a hub first
//     by one path or another at random (issue 23, make scale);
//   - a route is taken when its state number is newer, or equal at a
//     markedly lower cost (latency plus a per-hop charge);
//   - routes through a neighbour are advertised to that neighbour as
//     unreachable (poison reverse), with the newest state number another
//     neighbour lost the hub with, if newer than the route's: so that
//     number travels along working routes to the hub, which then takes
//     a newer even one and every hub takes its route again;
//   - a lost trunk (closed, or silent for beatSilence: routing_send.go)
//     makes every route through it unreachable with the next odd state
//     number, sent at once (no counting to infinity); a newer unreachable
//     entry is believed only from the route's own next hop, so a working
//     alternative is not thrown away;
//   - an unreachable route is eventually forgotten, at once when a hub of
//     the same name is reachable (the hub restarted with a new key: its
//     old identity's route is superseded, not listed until it expires).
//
// While any hub of an earlier version is known (h.legacy) the overlay
// keeps the earlier rules, which those hubs expect: every hub's state
// number advances every Interval, whole tables go to every neighbour every
// Interval, and a route whose state stops advancing expires.

// hopCost is what one more hop costs in route selection, so that among
// paths of about the same latency the shorter wins.
const hopCost = 500 * time.Microsecond

// route is this hub's route to another hub.
type route struct {
	hub     identity.ID
	name    string
	addrs   []netip.AddrPort
	nodes   int
	state   uint64
	hops    int
	latency time.Duration
	next    *peer     // nil: unreachable
	updated time.Time // when state last changed
	ver     int       // the hub's protocol version, as its entry says (0: before wire.VersionDelta)
	want    uint64    // a newer (odd) state a neighbour reported it unreachable with, while this route works; 0: none
	// reclaimDue: the hub became reachable saying it held no nodes, so it
	// was not told our nodes' names (names.go reclaim); it is told if its
	// entry says it holds some before reclaimDue (its count was on its
	// way: a hub sends it at once when its first node registers). Nodes
	// it admits later claim their names at every hub as any node does.
	reclaimDue time.Time
}

func (r *route) cost() time.Duration { return r.latency + time.Duration(r.hops)*hopCost }

// Route is a hub's route to another hub, as Routes reports it.
type Route struct {
	Hub     identity.ID
	Name    string
	NextHop identity.ID // zero when unreachable
	Hops    int         // wire.Unreachable when unreachable
	Latency time.Duration
	State   uint64 // odd when unreachable
	Addrs   []netip.AddrPort
	Nodes   int
}

// Reachable reports whether the route reaches its hub.
func (r Route) Reachable() bool { return !r.NextHop.IsZero() && r.State%2 == 0 }

// Routes lists the hub's routes to every other hub it knows, by name.
func (h *Hub) Routes() []Route {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Route, 0, len(h.routes))
	for _, r := range h.routes {
		rt := Route{Hub: r.hub, Name: r.name, Hops: r.hops, Latency: r.latency, State: r.state, Addrs: slices.Clone(r.addrs), Nodes: r.nodes}
		if r.next != nil {
			rt.NextHop = r.next.id
		}
		out = append(out, rt)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return string(out[i].Hub[:]) < string(out[j].Hub[:])
	})
	return out
}

func (h *Hub) expireAfter() time.Duration { return max(10*h.interval, 3*time.Second) }

func (h *Hub) forgetAfter() time.Duration { return max(60*h.interval, 10*time.Second) }
func (h *Hub) hubSilence() time.Duration  { return max(6*h.interval, 3*time.Second) }

// linkCost is the latency a link adds to a route: its smallest round
// trip yet (hub.Trunk.LowestRTT, which only falls); until the first pong,
// the trunk's it replaced, or a guess.
func linkCost(p *peer) time.Duration {
	if rtt := p.t.LowestRTT(); rtt > 0 {
		return rtt
	}
	if p.seed > 0 {
		return p.seed
	}
	return unmeasured
}

// unmeasured is the cost of a link before its first round trip.
const unmeasured = time.Millisecond

// applyGossip takes a neighbour's table entries, and keeps them as what
// that neighbour says now (peer.got).
func (h *Hub) applyGossip(p *peer, g *wire.Gossip) { h.applyAds(p, g.Routes, true) }

// queueGossip has a neighbour's table message taken by a goroutine of
// its own, in the order received, so that the trunk's reader goes on
// reading (and answering pings) while it waits for the hub's lock: on
// make scale's 100 hubs, readers waiting behind one another for it
// answered pings so late that their neighbours closed live trunks for
// silence. Past gossipQueue messages waiting, the reader takes them
// itself (a neighbour sending faster than they are taken is slowed).
func (h *Hub) queueGossip(p *peer, g *wire.Gossip) {
	p.gqmu.Lock()
	p.gq = append(p.gq, g)
	full, start := len(p.gq) >= gossipQueue, !p.gworking
	if start {
		p.gworking = true
	}
	p.gqmu.Unlock()
	switch {
	case full:
		h.drainGossip(p, false)
	case start:
		go h.drainGossip(p, true)
	}
}

// gossipQueue bounds the table messages waiting to be taken from one
// neighbour.
const gossipQueue = 64

// drainGossip takes p's queued table messages in order; worker: it is
// the goroutine queueGossip started, which ends when the queue is empty.
func (h *Hub) drainGossip(p *peer, worker bool) {
	p.gapply.Lock()
	defer p.gapply.Unlock()
	for {
		p.gqmu.Lock()
		if len(p.gq) == 0 {
			if worker {
				p.gworking = false
			}
			p.gqmu.Unlock()
			return
		}
		g := p.gq[0]
		p.gq[0] = nil
		p.gq = p.gq[1:]
		p.gqmu.Unlock()
		h.applyGossip(p, g)
	}
}

// reapply takes again what every neighbour said last, at every tick: a
// route's cost includes its trunk's round trip, measured after the first
// tables arrived and changing later, and with tables sent only on change
// (wire/delta.go) nothing else would look at them again. It costs no
// bytes on the wire.
// only, if not nil, limits it to that neighbour's.
func (h *Hub) reapply(only *peer) {
	type said struct {
		p   *peer
		ads []wire.RouteAd
	}
	var all []said
	h.mu.Lock()
	for _, p := range h.hubs {
		if only != nil && p != only {
			continue
		}
		ads := make([]wire.RouteAd, 0, len(p.got))
		for _, ad := range p.got {
			ads = append(ads, ad)
		}
		all = append(all, said{p, ads})
	}
	h.mu.Unlock()
	for _, s := range all {
		h.applyAds(s.p, s.ads, false)
	}
}

// applyAds takes entries from neighbour p; keep: they are new from p.
func (h *Hub) applyAds(p *peer, ads []wire.RouteAd, keep bool) {
	now := time.Now()
	changed := false
	h.mu.Lock()
	if h.hubs[p.id] != p {
		h.mu.Unlock()
		return // a link being replaced
	}
	if keep && p.got == nil {
		p.got = make(map[identity.ID]wire.RouteAd, len(ads))
	}
	// hubs that became reachable learn our nodes' names (reclaim), but
	// not those that say they hold no nodes (route.reclaimDue)
	var met, reclaimNow []identity.ID
	for i := range ads {
		ad := &ads[i]
		if keep {
			p.got[ad.Hub] = *ad
		}
		if ad.Hub == h.id {
			changed = h.reportedLocked(p, ad) || changed
			continue
		}
		r := h.routes[ad.Hub]
		was := r != nil && r.next != nil
		var want, state uint64
		if r != nil {
			want, state = r.want, r.state
		}
		h.applyAdLocked(p, ad, now)
		r = h.routes[ad.Hub]
		is := r != nil && r.next != nil
		// Only a change of reachability is sent at once; a next hop
		// that changes between two working routes waits for the next
		// Interval (see the package's routing rules). A newer state a
		// neighbour lost the hub with is passed on at once too, towards
		// the hub, and so is a new state number of a hub of
		// wire.VersionDelta under tables by change (wire/delta.go): it is
		// news (a hub lost, or back), not the clock's advance every hub
		// makes every Interval under the earlier rules.
		news := r != nil && r.state != state && r.ver >= wire.VersionDelta && !h.legacy
		changed = changed || was != is || news || r != nil && r.want > want
		switch {
		case !was && is:
			met = append(met, ad.Hub)
			r.reclaimDue = time.Time{}
			if r.nodes == 0 && r.ver >= wire.VersionDelta && !h.legacy {
				r.reclaimDue = now.Add(h.interval)
			} else {
				reclaimNow = append(reclaimNow, ad.Hub)
			}
		case is && r.nodes > 0 && now.Before(r.reclaimDue):
			r.reclaimDue = time.Time{}
			reclaimNow = append(reclaimNow, ad.Hub)
		}
	}
	if changed {
		h.unreachedLocked() // names.go
	}
	if len(met) > 0 {
		h.dialNearestLocked() // dial.go
	}
	h.mu.Unlock()
	if changed {
		h.triggerUpdate()
	}
	for _, id := range met {
		h.widenClaims(id) // names.go
	}
	for _, id := range reclaimNow {
		h.reclaim(id)
		h.reclaimAddrs(id)
	}
}

// reportedLocked takes this hub's own entry from neighbour p: only ever
// sent to it as unreachable with a state number a hub lost it with
// (wire/delta.go). When that number is as new as its own, the hub takes
// the next even number above it, so that every hub takes its route anew;
// true then.
func (h *Hub) reportedLocked(p *peer, ad *wire.RouteAd) bool {
	if ad.State < h.state || h.helloVersion() < wire.VersionDelta {
		return false
	}
	if ad.State > h.state+1 {
		// every hub's number for us is one we made (even) or the next
		// odd one: a higher one is no loss of ours, and taking it would
		// let a neighbour push our numbers to the end of their range
		h.logf("hub %s: hub %s reported it lost at state %d, above any it made (%d): ignored", h.cfg.Name, p.name, ad.State, h.state)
		return false
	}
	old := h.state
	h.state = ad.State&^1 + 2
	h.logf("hub %s: hub %s passed on that a hub lost it at state %d (ours %d): now %d", h.cfg.Name, p.name, ad.State, old, h.state)
	return true
}

// supersededLocked forgets the unreachable routes to hubs named as a
// reachable one: the same hub under an earlier key.
func (h *Hub) supersededLocked() {
	now := map[string]identity.ID{}
	for id, r := range h.routes {
		if r.next != nil && r.name != "" && r.name != id.Short() {
			now[r.name] = id
		}
	}
	for id, r := range h.routes {
		if cur, ok := now[r.name]; ok && r.next == nil && cur != id {
			h.logf("hub %s: forgetting the route to hub %s (%s): the hub of that name is now %s", h.cfg.Name, r.name, id.Short(), cur.Short())
			delete(h.routes, id)
		}
	}
}

// applyAdLocked applies one entry from neighbour p and reports whether
// reachability or a next hop changed.
func (h *Hub) applyAdLocked(p *peer, ad *wire.RouteAd, now time.Time) bool {
	if ad.Hub == h.id {
		return false
	}
	reach := ad.Reachable() && ad.Hops+1 < wire.MaxTTL
	hops := ad.Hops + 1
	lat := time.Duration(ad.LatencyUs)*time.Microsecond + linkCost(p)
	r := h.routes[ad.Hub]
	if r == nil {
		if !reach {
			return false
		}
		r = &route{hub: ad.Hub}
		h.routes[ad.Hub] = r
		r.take(p, ad, hops, lat, now)
		return true // applyAds dials it, if it is among the nearest
	}
	switch {
	case ad.State > r.state && reach:
		changed := r.next != p
		r.take(p, ad, hops, lat, now)
		return changed
	case ad.State > r.state:
		if r.next == nil || r.next == p {
			changed := r.next != nil
			r.state, r.next, r.hops, r.updated = ad.State, nil, wire.Unreachable, now
			r.settle()
			return changed
		}
		// our route works through another neighbour, with an older
		// state: pass the newer one on towards the hub (wire/delta.go)
		r.want = max(r.want, ad.State)
	case ad.State == r.state && reach:
		if r.next == p {
			if worse := lat+time.Duration(hops)*hopCost > r.cost()*11/10; worse && !h.legacy && r.hub != p.id {
				// A cost risen at the same state (a link measured above
				// its guess, a hop's route longer) is not taken: two
				// hubs could then route through each other and count
				// their costs up for ever, as no state number advances
				// by the clock to end it (DSDV takes a worse metric
				// only with a newer number). The hub is asked for a
				// newer state instead, as for a lost route, and every
				// hub takes its route anew from it (wire/delta.go). A
				// neighbour's own route has no hop to loop through.
				r.want = max(r.want, r.state|1)
				oh, ol := r.hops, r.latency
				r.take(p, ad, hops, lat, now)
				r.hops, r.latency = oh, ol
				return false
			}
			r.take(p, ad, hops, lat, now)
			return false
		}
		if r.next == nil || lat+time.Duration(hops)*hopCost < r.cost()*9/10 {
			r.take(p, ad, hops, lat, now)
			return true
		}
	}
	return false
}

func (r *route) take(p *peer, ad *wire.RouteAd, hops int, lat time.Duration, now time.Time) {
	if ad.State != r.state {
		r.updated = now
	}
	r.state, r.next, r.hops, r.latency = ad.State, p, hops, lat
	if ad.Name != "" {
		r.name = ad.Name
	}
	if r.name == "" {
		r.name = r.hub.Short()
	}
	r.addrs = slices.Clone(ad.Addrs)
	r.nodes = ad.Nodes
	r.ver = ad.Ver
	r.settle()
}

// settle forgets a wanted state the route's own has reached.
func (r *route) settle() {
	if r.want <= r.state {
		r.want = 0
	}
}

// linkLostLocked makes the routes through p unreachable; true if any.
func (h *Hub) linkLostLocked(p *peer) bool {
	lost := false
	now := time.Now()
	for _, r := range h.routes {
		if r.next == p {
			r.next, r.hops, r.updated = nil, wire.Unreachable, now
			r.state |= 1 // the next odd number
			r.settle()
			lost = true
		}
	}
	return lost
}

// expireLocked ages the table; true if a route became unreachable. Routes
// expire only under the rules before wire.VersionDelta (h.legacy), whose
// hubs advance their state numbers every interval; unreachable routes
// are forgotten in any case.
func (h *Hub) expireLocked(now time.Time) bool {
	changed := false
	for id, r := range h.routes {
		age := now.Sub(r.updated)
		switch {
		case r.next != nil && h.legacy && age > h.expireAfter():
			h.logf("hub %s: route to hub %s expired (no news for %v)", h.cfg.Name, r.name, age.Round(time.Millisecond))
			r.next, r.hops, r.updated = nil, wire.Unreachable, now
			r.state |= 1
			r.settle()
			changed = true
		case r.next == nil && age > h.forgetAfter():
			delete(h.routes, id)
		}
	}
	h.supersededLocked()
	if changed {
		h.unreachedLocked() // names.go
	}
	return changed
}

// nextHop returns the neighbour on the route to hub id, or nil.
func (h *Hub) nextHop(id identity.ID) *peer {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.routes[id]; r != nil && r.next != nil {
		return r.next
	}
	return nil
}

// hubName names a hub for messages: its name if known, else its short ID.
func (h *Hub) hubName(id identity.ID) string {
	if id == h.id {
		return h.cfg.Name
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.routes[id]; r != nil && r.name != "" {
		return r.name
	}
	return id.Short()
}
