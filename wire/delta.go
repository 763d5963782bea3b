package wire

// Tables by change (issue 23): between two hubs of VersionDelta or
// later, an idle overlay sends no routing tables, only trunk pings.
//
//	hub → neighbour hub, on their trunk, never routed:
//	  KGossip {"routes":[{"hub":…,"name":"das3v","state":1795654923000,
//	           "hops":2,"latency_us":31000,"addrs":[…],"nodes":120,"ver":5}]}
//
// The message is the KGossip of earlier versions; what changes is when it
// is sent and what it holds:
//
//   - a hub sends a neighbour its whole table once, when their trunk comes
//     up, and from then on only the entries that changed since it last
//     sent them to that neighbour (state number, reachable or not, hop
//     count, latency by more than a tenth, name, addresses, node count
//     by more than an eighth). A trunk is one TCP stream whose frames
//     are never dropped while it is open (hub.Trunk queues without
//     limit), so the neighbour cannot fall out of step without the trunk
//     closing; a new trunk starts with a whole table again. No sequence
//     number is needed for that reason.
//   - a hub's own state number advances only when the hub hears itself
//     reported unreachable with a state number as new as its own: it then
//     takes the next even number above it, and every hub takes the newer
//     route. A hub that keeps a working route to hub X while a neighbour
//     reports X unreachable with a newer (odd) number passes that number
//     on to its own next hop towards X, in the entry it sends there (poison
//     reverse: unreachable, with that newer number), and X's neighbours
//     pass it to X itself; so X learns it within one crossing of the
//     overlay, where DSDV would wait for X's next periodic number.
//   - routes do not expire by age: a hub learns that a neighbour died from
//     its trunk (closed, or silent for hub.HubSilence), and that a hub
//     further away died from the odd numbers its neighbours spread at once.
//
// RouteAd.Ver is the protocol version of the entry's hub as that hub
// stated it in its own entry, carried along unchanged by hubs of
// VersionDelta or later; 0 (omitted) from a hub of an earlier version or
// through one. Hubs send it only to neighbours of VersionDelta or later
// (decoders are strict: an older hub would close its trunk over an
// unknown field). A hub that knows of any reachable hub whose entry says
// less than VersionDelta, or has a neighbour that does, keeps the earlier
// rules for the whole overlay: its own state number advances every
// interval, it sends its whole table to every neighbour every interval,
// and routes whose state stops advancing expire; the hubs of an earlier
// version expect exactly that.
const (
	// VersionDelta is the first protocol version (Hello.Version) whose
	// hubs send tables by change and fill RouteAd.Ver.
	VersionDelta = 5

	// maxVer bounds RouteAd.Ver.
	maxVer = 1 << 16
)

// StripVer returns, for a neighbour of version v before VersionDelta, a
// copy of g without RouteAd.Ver (g itself otherwise).
func StripVer(g *Gossip, v int) *Gossip {
	if v >= VersionDelta || g == nil {
		return g
	}
	c := &Gossip{Routes: make([]RouteAd, len(g.Routes))}
	copy(c.Routes, g.Routes)
	for i := range c.Routes {
		c.Routes[i].Ver = 0
	}
	return c
}
