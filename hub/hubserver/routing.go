package hubserver

import (
	"context"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// Routing is DSDV (destination-sequenced distance vector), the
// SmartSockets gossip made precise:
//
//   - every hub originates even state numbers for itself, increasing every
//     Interval (starting from the clock, so a restarted hub's are newer);
//   - every Interval, and soon after a hub becomes reachable or
//     unreachable, a hub sends each neighbour its whole table: for every
//     hub it knows, the state number, hop count, accumulated latency,
//     name, listen addresses and node count. A next hop that changes
//     between two working routes waits for the next Interval: on a mesh
//     of sites at similar distances a hub's newer state number reaches a
//     hub first by one path or another at random, and sending the tables
//     at each such change had 20 hubs each send them about 20 times a
//     second instead of once (issue 23, make scale);
//   - a route is taken when its state number is newer, or equal at a
//     markedly lower cost (latency plus a per-hop charge);
//   - routes through a neighbour are advertised to that neighbour as
//     unreachable (poison reverse);
//   - a lost link makes every route through it unreachable with the next
//     odd state number, sent at once (no counting to infinity); a newer
//     unreachable entry is believed only from the route's own next hop, so
//     a working alternative is not thrown away;
//   - a route whose state stops advancing expires to unreachable, and an
//     unreachable route is eventually forgotten, at once when a hub of
//     the same name is reachable (the hub restarted with a new key: its
//     old identity's route is superseded, not listed until it expires).

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

// linkCost is the latency a link adds to a route: its smallest recent
// round trip, or a guess until the first pong.
func linkCost(p *peer) time.Duration {
	if rtt := p.t.MinRTT(); rtt > 0 {
		return rtt
	}
	return time.Millisecond
}

// applyGossip takes a neighbour's table entries.
func (h *Hub) applyGossip(p *peer, g *wire.Gossip) {
	now := time.Now()
	changed := false
	h.mu.Lock()
	if h.hubs[p.id] != p {
		h.mu.Unlock()
		return // a link being replaced
	}
	var met []identity.ID // hubs that became reachable: they learn our nodes' names
	for i := range g.Routes {
		ad := &g.Routes[i]
		r := h.routes[ad.Hub]
		was := r != nil && r.next != nil
		h.applyAdLocked(p, ad, now)
		r = h.routes[ad.Hub]
		is := r != nil && r.next != nil
		// Only a change of reachability is sent at once; a next hop
		// that changes between two working routes waits for the next
		// Interval (see the package's routing rules).
		changed = changed || was != is
		if !was && is {
			met = append(met, ad.Hub)
		}
	}
	if changed {
		h.unreachedLocked() // names.go
	}
	h.mu.Unlock()
	if changed {
		h.triggerUpdate()
	}
	for _, id := range met {
		h.reclaim(id)
		h.reclaimAddrs(id)
	}
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
		h.maybeDialLocked(r)
		return true
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
			return changed
		}
	case ad.State == r.state && reach:
		if r.next == p {
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
}

// linkLostLocked makes the routes through p unreachable; true if any.
func (h *Hub) linkLostLocked(p *peer) bool {
	lost := false
	now := time.Now()
	for _, r := range h.routes {
		if r.next == p {
			r.next, r.hops, r.updated = nil, wire.Unreachable, now
			r.state |= 1 // the next odd number
			lost = true
		}
	}
	return lost
}

// expireLocked ages the table; true if a route became unreachable.
func (h *Hub) expireLocked(now time.Time) bool {
	changed := false
	for id, r := range h.routes {
		age := now.Sub(r.updated)
		switch {
		case r.next != nil && age > h.expireAfter():
			h.logf("hub %s: route to hub %s expired (no news for %v)", h.cfg.Name, r.name, age.Round(time.Millisecond))
			r.next, r.hops, r.updated = nil, wire.Unreachable, now
			r.state |= 1
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

// tableLocked is the table as sent to neighbour p: our own entry first,
// routes through p poisoned.
func (h *Hub) tableLocked(p *peer) []wire.RouteAd {
	ads := make([]wire.RouteAd, 0, len(h.routes)+1)
	ads = append(ads, wire.RouteAd{Hub: h.id, Name: h.cfg.Name, State: h.state, Addrs: h.addrs, Nodes: len(h.nodes)})
	for _, r := range h.routes {
		if r.hub == p.id {
			continue
		}
		ad := wire.RouteAd{Hub: r.hub, Name: r.name, State: r.state, Addrs: r.addrs, Nodes: r.nodes, Hops: wire.Unreachable}
		if r.next != nil && r.next != p {
			ad.Hops, ad.LatencyUs = r.hops, r.latency.Microseconds()
		}
		ads = append(ads, ad)
	}
	return ads
}

// sendTable sends p our table, in as many messages as it takes.
func (h *Hub) sendTable(p *peer) {
	h.mu.Lock()
	ads := h.tableLocked(p)
	h.mu.Unlock()
	const budget = 40 << 10 // well under wire.MaxControl
	for len(ads) > 0 {
		n, size := 0, 64
		for n < len(ads) && (n == 0 || size+adSize(&ads[n]) < budget) {
			size += adSize(&ads[n])
			n++
		}
		p.t.SendControl(&wire.Message{Kind: wire.KGossip, Gossip: &wire.Gossip{Routes: ads[:n]}})
		ads = ads[n:]
	}
}

// adSize bounds an entry's JSON size.
func adSize(ad *wire.RouteAd) int { return 200 + 6*len(ad.Name) + 56*len(ad.Addrs) }

func (h *Hub) broadcastTables() {
	h.mu.Lock()
	peers := make([]*peer, 0, len(h.hubs))
	for _, p := range h.hubs {
		peers = append(peers, p)
	}
	h.mu.Unlock()
	for _, p := range peers {
		h.sendTable(p)
	}
}

// triggerUpdate asks the gossip loop to send the tables soon.
func (h *Hub) triggerUpdate() {
	select {
	case h.trigger <- struct{}{}:
	default:
	}
}

// gossipLoop ticks every Interval: a new state number, expiry, tables,
// pings and liveness; and sends triggered updates in between.
func (h *Hub) gossipLoop(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	gap := min(h.interval/4, 50*time.Millisecond)
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.tick()
			last = time.Now()
		case <-h.trigger:
			if d := time.Since(last); d < gap {
				select {
				case <-ctx.Done():
					return
				case <-time.After(gap - d):
				}
			}
			h.broadcastTables()
			last = time.Now()
		}
	}
}

func (h *Hub) tick() {
	now := time.Now()
	h.mu.Lock()
	h.state += 2
	h.expireLocked(now)
	for _, r := range h.routes {
		h.maybeDialLocked(r)
	}
	peers := make([]*peer, 0, len(h.all))
	for p := range h.all {
		peers = append(peers, p)
	}
	h.mu.Unlock()
	for _, p := range peers {
		silence, every := hub.NodeSilence, hub.NodePingEvery
		if p.isHub {
			silence, every = h.hubSilence(), h.interval
		}
		if s := p.t.SilentFor(); s > silence {
			p.t.Close(&hub.SilentError{For: s.Round(time.Millisecond)})
			continue
		}
		if p.t.SincePing() >= every*9/10 {
			p.t.Ping()
		}
		if p.isHub {
			for _, l := range p.extraLanes() {
				if s := l.t.SilentFor(); s > silence {
					l.t.Close(&hub.SilentError{For: s.Round(time.Millisecond)})
				} else if l.t.SincePing() >= every*9/10 {
					l.t.Ping()
				}
			}
			h.maintainLanes(h.ctx, p) // lanes.go
		}
	}
	h.broadcastTables()
}
