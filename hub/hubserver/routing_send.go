package hubserver

import (
	"context"
	"slices"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// Liveness of a trunk between two hubs of wire.VersionDelta or later: the
// hub that dialled it pings it every hubBeat (or every Interval, if
// shorter), the other end answers each ping and pings itself only every
// hubRTTEvery (for its own round-trip figure); either end closes the
// trunk after beatSilence without a frame from the other: three pings
// missed (2.1 s), or Interval and half a second if longer, which issue 23's
// bound allows (routes right within 2 s and one Interval of a hub's
// failure): a hub whose Interval is long is not hurried to judge a
// neighbour a loaded moment kept quiet (make scale's 100 hubs in one
// process on two shared cores had live trunks closed at 2.1 s). A hub
// that ran late itself judges by the earlier bound, hubSilence, for a
// while (beat). A ping and its pong are 48 bytes each, sealed, so liveness
// costs a hub D·48/hubBeat bytes a second for D such trunks: 905 B/s for
// make scale's 13.2 trunks a hub, within issue 23's 1 KB/s (a beat of
// 500 ms would fit only up to 10 trunks a hub). Trunks to hubs of earlier
// versions keep the earlier rule: pings every Interval from both ends,
// closed after hubSilence.
const (
	hubBeat        = 700 * time.Millisecond
	hubRTTEvery    = 30 * time.Second
	beatCheck      = hubBeat / 7 // how often the beat loop looks
	firstTableWait = time.Second // the longest a trunk's first table waits for its round trip
	// rttEarly: for so long the end that did not dial pings as often as
	// the dialler, as a trunk's first round trips come while the overlay
	// forms and the machines are busiest (one ping every hubRTTEvery after
	// that kept make scale's routes moving 30 s on, as a lower figure came)
	rttEarly = 10 * time.Second
	// nodesAdEvery: how often at most a hub's own node count changes in
	// its table (tick)
	nodesAdEvery = 30 * time.Second
)

// beats reports whether p's trunk is kept alive by beats: a hub
// neighbour of wire.VersionDelta or later.
func (h *Hub) beatSilence() time.Duration { return TrunkSilence(h.interval) }

// DefaultInterval is a hub's Config.Interval when it is zero.
const DefaultInterval = time.Second

// TrunkSilence is how long a hub whose Config.Interval is interval
// (zero: DefaultInterval) waits without a frame on a trunk to another
// hub before it closes it: the overlay's time to detect a hub or a path
// between hubs lost without a word (the circuits through the trunk are
// reset then).
func TrunkSilence(interval time.Duration) time.Duration {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return max(3*hubBeat, interval+hubBeat*5/7)
}

// seeded reports whether p's trunk has the cost of the trunk it replaced
// (peer.seed) until its own is measured.
func (h *Hub) seeded(p *peer) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return p.seed > 0
}

// age is how long p's trunk has run (run), 0 before.
func (p *peer) age() time.Duration {
	p.gmu.Lock()
	defer p.gmu.Unlock()
	if p.linked.IsZero() {
		return 0
	}
	return time.Since(p.linked)
}

func (p *peer) beats() bool { return p.isHub && p.versionWith() >= wire.VersionDelta }

// versionWith is the protocol version the hub and neighbour p both speak.
func (p *peer) versionWith() int { return min(p.version, p.h.helloVersion()) }

// tableLocked is the table as sent to neighbour p: our own entry first,
// routes through p poisoned, p's own entry only to pass it a state
// another neighbour lost it with.
func (h *Hub) tableLocked(p *peer) []wire.RouteAd {
	ads := make([]wire.RouteAd, 0, len(h.routes)+1)
	nodes := len(h.nodes)
	if !h.legacy {
		nodes = h.nodesAd
	}
	ads = append(ads, wire.RouteAd{Hub: h.id, Name: h.cfg.Name, State: h.state, Addrs: h.addrs, Nodes: nodes, Ver: h.helloVersion()})
	delta := h.helloVersion() >= wire.VersionDelta // a test's hub playing an earlier version passes no wanted states
	for _, r := range h.routes {
		if r.hub == p.id {
			// p's own entry, only to tell it that it was lost at a newer
			// state than its own: a neighbour lost it (want), or we did
			// (an odd state: our trunk to it was lost, and p's even
			// state, older, does not bring the route back until p takes
			// a newer one)
			if st := max(r.want, r.state); delta && (r.want > r.state || r.next == nil && st%2 == 1) {
				ads = append(ads, wire.RouteAd{Hub: r.hub, Name: r.name, State: st, Hops: wire.Unreachable, Ver: r.ver})
			}
			continue
		}
		ad := wire.RouteAd{Hub: r.hub, Name: r.name, State: r.state, Addrs: r.addrs, Nodes: r.nodes, Hops: wire.Unreachable, Ver: r.ver}
		switch {
		case r.next != nil && r.next != p:
			ad.Hops, ad.LatencyUs = r.hops, r.latency.Microseconds()
		case r.next == p && delta:
			ad.State = max(r.state, r.want)
		}
		ads = append(ads, ad)
	}
	return ads
}

// adChanged reports whether entry b differs from a, sent before, enough
// to send it: a latency by a quarter or less and a node count by an
// eighth or less are not worth a message (on a loaded machine a trunk's
// lowest round trip keeps falling by a little for a while, and each fall
// moved a route's latency, and with it every hub's behind it).
func adChanged(a, b *wire.RouteAd) bool {
	apart := func(x, y int64, frac int64) bool {
		d := x - y
		if d < 0 {
			d = -d
		}
		return d*frac > max(x, y)
	}
	return a.State != b.State || a.Hops != b.Hops || a.Name != b.Name || a.Ver != b.Ver ||
		!slices.Equal(a.Addrs, b.Addrs) || apart(a.LatencyUs, b.LatencyUs, 4) ||
		(a.Nodes == 0) != (b.Nodes == 0) || apart(int64(a.Nodes), int64(b.Nodes), 8)
}

// sendTable sends p our table, in as many messages as it takes: the whole
// table to a hub of an earlier version, or while one is known; otherwise
// the entries that changed since p was last sent them (all of them the
// first time).
//
// The first table but our own entry waits (up to firstTableWait) for the
// trunk's round trip to be measured: the neighbour measures its own at
// the same time, and a table taken before that costs its routes at a
// guess, which the measurement then raises, and a cost risen at the same
// state has every hub ask its hub for a newer one (routing.go). Our own
// entry goes at once: a neighbour's route to its neighbour may rise.
func (h *Hub) sendTable(p *peer) {
	p.gmu.Lock()
	defer p.gmu.Unlock()
	// only our own entry (a route to us at once) until the round trip is
	// measured: beat triggers the tables then, tick after firstTableWait
	early := !p.tabled && !p.linked.IsZero() && p.t.LowestRTT() == 0 && time.Since(p.linked) < firstTableWait && !h.seeded(p)
	p.tabled = !early
	h.mu.Lock()
	ads := h.tableLocked(p)
	v := p.versionWith()
	whole := h.legacy || v < wire.VersionDelta
	h.mu.Unlock()
	if early {
		ads = ads[:1]
	}
	if p.sent == nil {
		p.sent = make(map[identity.ID]wire.RouteAd, len(ads))
	}
	if !whole {
		ads = slices.DeleteFunc(ads, func(ad wire.RouteAd) bool {
			last, ok := p.sent[ad.Hub]
			return ok && !adChanged(&last, &ad)
		})
	}
	for _, ad := range ads {
		ad.Addrs = slices.Clone(ad.Addrs)
		p.sent[ad.Hub] = ad
	}
	const budget = 40 << 10 // well under wire.MaxControl
	for len(ads) > 0 {
		n, size := 0, 64
		for n < len(ads) && (n == 0 || size+adSize(&ads[n]) < budget) {
			size += adSize(&ads[n])
			n++
		}
		g := wire.StripVer(&wire.Gossip{Routes: ads[:n]}, v)
		p.t.SendControl(&wire.Message{Kind: wire.KGossip, Gossip: g})
		h.counts.gossip.Add(1)
		ads = ads[n:]
	}
}

// adSize bounds an entry's JSON size.
func adSize(ad *wire.RouteAd) int { return 210 + 6*len(ad.Name) + 56*len(ad.Addrs) }

func (h *Hub) broadcastTables() {
	for _, p := range h.neighbours() {
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

// gossipLoop ticks every Interval (expiry, tables, pings of nodes and of
// hubs of earlier versions), beats every beatCheck (on a goroutine of its
// own), and sends triggered updates in between.
func (h *Hub) gossipLoop(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	// beats on their own goroutine: a tick's work (pinging thousands of
	// nodes, sending tables) must not make the hub think itself late
	beats := make(chan struct{})
	defer func() { <-beats }()
	go func() {
		defer close(beats)
		b := time.NewTicker(beatCheck)
		defer b.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-b.C:
				h.beat()
			}
		}
	}()
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

// legacyLocked reports whether a hub of a version before
// wire.VersionDelta is known: a neighbour, or a reachable route whose
// entry does not say VersionDelta or later.
func (h *Hub) legacyLocked() bool {
	if h.helloVersion() < wire.VersionDelta {
		return true
	}
	for _, p := range h.hubs {
		if p.version < wire.VersionDelta {
			return true
		}
	}
	for _, r := range h.routes {
		if r.next != nil && r.ver < wire.VersionDelta {
			return true
		}
	}
	return false
}

func (h *Hub) tick() {
	now := time.Now()
	h.mu.Lock()
	legacy := h.legacyLocked()
	if legacy != h.legacy {
		h.logf("hub %s: a hub of a version before %d known: %v (tables every interval while it is)", h.cfg.Name, wire.VersionDelta, legacy)
		for _, r := range h.routes {
			r.updated = now // no route expires for the time it did not advance under the other rules
		}
	}
	h.legacy = legacy
	if legacy {
		h.state += 2
	}
	// The node count other hubs are told (status, dashboards) moves at
	// once between none and some, else at most every nodesAdEvery: every
	// change is sent across the whole overlay, and 1,000 nodes attaching
	// to 100 hubs moved the counts about 900 times.
	if n := len(h.nodes); n != h.nodesAd && ((n == 0) != (h.nodesAd == 0) || now.Sub(h.nodesAdAt) >= nodesAdEvery) {
		h.nodesAd, h.nodesAdAt = n, now
	}
	h.expireLocked(now)
	h.mu.Unlock()
	h.reapply(nil) // routing.go
	h.mu.Lock()
	h.dialNearestLocked() // dial.go
	peers := make([]*peer, 0, len(h.all))
	beaten := map[*peer]bool{} // trunks whose first connection beat keeps alive
	for p := range h.all {
		peers = append(peers, p)
		if p.beats() && h.hubs[p.id] == p {
			beaten[p] = true
		}
	}
	h.mu.Unlock()
	for _, p := range peers {
		silence, every := hub.NodeSilence, hub.NodePingEvery
		if p.isHub {
			silence, every = h.hubSilence(), h.interval
		}
		if !beaten[p] {
			if s := p.t.SilentFor(); s > silence {
				p.t.Close(&hub.SilentError{For: s.Round(time.Millisecond)})
				continue
			}
			if p.t.SincePing() >= every*9/10 {
				p.t.Ping()
			}
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

// beat keeps the trunks to hub neighbours of wire.VersionDelta or later
// alive, and closes those silent for beatSilence.
//
// It also takes a neighbour's entries again when its trunk's cost
// (linkCost) moved by more than a quarter, as when it is first measured:
// the first table arrives before the first pong, and with tables by
// change it would not come again to correct the guess.
func (h *Hub) beat() {
	h.mu.Lock()
	peers := make([]*peer, 0, len(h.hubs))
	var moved []*peer
	for _, p := range h.hubs {
		if p.beats() {
			peers = append(peers, p)
		}
		if c := linkCost(p); (p.t.LowestRTT() > 0 || p.seed > 0) && (p.cost == 0 || (p.cost-c)*4 > p.cost || (c-p.cost)*4 > p.cost) {
			p.cost = c
			moved = append(moved, p)
		}
	}
	// A hub that did not itself run on time (a loaded machine, a long
	// pause) cannot tell a neighbour's silence from its own lateness: it
	// waits another beatSilence on time before it judges, up to the
	// earlier rule's bound (hubSilence).
	now := time.Now()
	if !h.lastBeat.IsZero() && now.Sub(h.lastBeat) > max(3*beatCheck, h.beatSilence()/3) {
		h.beatGrace = now.Add(h.beatSilence())
	}
	h.lastBeat = now
	silence := h.beatSilence()
	if now.Before(h.beatGrace) {
		silence = h.hubSilence()
	}
	h.mu.Unlock()
	for _, p := range moved {
		h.reapply(p) // routing.go
	}
	if len(moved) > 0 {
		h.triggerUpdate() // first tables wait for this (sendTable)
	}
	for _, p := range peers {
		if s := p.t.SilentFor(); s > silence {
			p.t.Close(&hub.SilentError{For: s.Round(time.Millisecond)})
			continue
		}
		every := min(hubBeat, h.interval)
		if !p.dialed && p.t.LowestRTT() > 0 && p.age() > rttEarly {
			every = hubRTTEvery
		}
		if p.t.SincePing() >= every-beatCheck/2 {
			p.t.Ping()
		}
	}
}
