package hubserver

import (
	"net/netip"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// The directory of virtual addresses between hubs (vipaddr.go says the
// rule): other hubs' claims and answers, claims when hubs meet, and
// lookups by virtual address, answered as lookups by name (control.go's
// queries and KFound).

// vipMessage handles a routed message of the directory for this hub.
func (h *Hub) vipMessage(r *wire.Routed) {
	switch r.Msg.Kind {
	case wire.KLookupAddr:
		h.route(&wire.Routed{FromHub: h.id, ToHub: r.FromHub, ToNode: r.FromNode, TTL: routedTTL,
			Msg: &wire.Message{Kind: wire.KFound, Found: &wire.Found{Query: r.Msg.LookupAddr.Query, Matches: h.addrMatches(r.Msg.LookupAddr.Addr)}}})
	case wire.KAddrClaim, wire.KAddrClaimed:
		if !r.FromNode.IsZero() {
			// hubs' business: a node's claim would take or free others'
			// addresses.
			h.logf("hub %s: dropping a %s message from node %s: only hubs send those", h.cfg.Name, r.Msg.Kind, r.FromNode.Short())
			return
		}
		if r.Msg.Kind == wire.KAddrClaim {
			h.addrClaimed(r)
		} else {
			h.answerAddrClaim(r.FromHub, r.Msg.AddrClaimed)
		}
	}
}

// addrMatches is the attached node holding a, if any.
func (h *Hub) addrMatches(a netip.Addr) []identity.Machine {
	h.mu.Lock()
	defer h.mu.Unlock()
	if hd := h.vipLocked().held[a]; h.liveLocked(hd) && hd.p.movedTo.IsZero() {
		return []identity.Machine{h.withVirtualLocked(hd.p)}
	}
	return nil
}

// withVirtualLocked is node p's record as a lookup answers it: with the
// virtual addresses it holds here (Machine.Virtual), exactly those
// addrMatches gives it; h.mu is held.
func (h *Hub) withVirtualLocked(p *peer) identity.Machine {
	m := p.machine
	m.Virtual = nil
	for _, a := range h.vipLocked().nodes[p] {
		if hd := h.vipLocked().held[a]; a.IsValid() && hd != nil && hd.p == p {
			m.Virtual = append(m.Virtual, a)
		}
	}
	return m
}

// lookupAddr answers a node's lookup of a virtual address from the
// attached nodes, or else asks every reachable hub (as lookup does).
func (h *Hub) lookupAddr(p *peer, lk *wire.LookupAddr) {
	h.askHubs(p, lk.Query, h.addrMatches(lk.Addr), func(qid uint64) *wire.Message {
		return &wire.Message{Kind: wire.KLookupAddr, LookupAddr: &wire.LookupAddr{Query: qid, Addr: lk.Addr}}
	})
}

// addrClaimed answers another hub's claim of an address: this hub's
// holders of it, after judging the claim against them (its nodes that
// lose the address are told, its claims that lose are refused).
func (h *Hub) addrClaimed(r *wire.Routed) {
	c := r.Msg.AddrClaim
	if c.Holding.Node.Hub != r.FromHub {
		return // a hub speaks for its own nodes only
	}
	h.mu.Lock()
	d := h.vipLocked()
	var holders []wire.Holding
	if hd := d.held[c.Addr]; h.liveLocked(hd) && hd.p.id != c.Holding.Node.ID {
		holders = append(holders, hd.holdingLocked())
	}
	for _, o := range d.claims {
		if o.addr == c.Addr && o.holding.Node.ID != c.Holding.Node.ID && o.lost == nil && len(holders) < 16 {
			holders = append(holders, o.holding)
		}
	}
	evict, _ := h.judgeAddrLocked(c.Addr, &c.Holding)
	h.mu.Unlock()
	h.tellLost(evict, c.Addr, &c.Holding)
	h.route(&wire.Routed{FromHub: h.id, ToHub: r.FromHub, TTL: routedTTL,
		Msg: &wire.Message{Kind: wire.KAddrClaimed, AddrClaimed: &wire.AddrClaimed{Query: c.Query, Addr: c.Addr, Holders: holders}}})
}

// answerAddrClaim takes a hub's answer to one of our address claims. For
// a claim sent when the hubs met (query 0), or one no longer waiting, our
// node that holds the address loses it to an attached holder there that
// keeps it.
func (h *Hub) answerAddrClaim(from identity.ID, a *wire.AddrClaimed) {
	h.mu.Lock()
	d := h.vipLocked()
	cl := d.claims[a.Query]
	if a.Query == 0 || cl == nil {
		type loss struct {
			p  *peer
			by wire.Holding
		}
		var lost []loss
		for i := range a.Holders {
			o := &a.Holders[i]
			if o.Node.Hub != from || !o.Attached {
				continue
			}
			if hd := d.held[a.Addr]; h.liveLocked(hd) && hd.p.id != o.Node.ID {
				if hold := hd.holdingLocked(); keeps(o, &hold) {
					h.dropAddrLocked(hd.p, a.Addr)
					lost = append(lost, loss{hd.p, *o})
				}
			}
		}
		h.mu.Unlock()
		for _, l := range lost {
			h.tellLost([]*peer{l.p}, a.Addr, &l.by)
		}
		return
	}
	defer h.mu.Unlock()
	if !cl.waiting[from] || cl.lost != nil || cl.addr != a.Addr {
		return
	}
	delete(cl.waiting, from)
	for i := range a.Holders {
		o := &a.Holders[i]
		if o.Node.ID == cl.holding.Node.ID || o.Node.Hub != from {
			continue
		}
		if keeps(o, &cl.holding) {
			cl.lose(addrTaken(cl.addr, o))
			return
		}
	}
	if len(cl.waiting) == 0 {
		close(cl.done)
	}
}

// reclaimAddrs tells a hub that just became reachable the addresses this
// hub's nodes hold (claims of query 0, answered like any other): if both
// hubs gave one address to two nodes while they could not reach each
// other, the rule decides at both and the node that loses it is told.
func (h *Hub) reclaimAddrs(to identity.ID) {
	h.mu.Lock()
	var claims []*wire.AddrClaim
	for a, hd := range h.vipLocked().held {
		if h.liveLocked(hd) {
			claims = append(claims, &wire.AddrClaim{Addr: a, Holding: hd.holdingLocked()})
		}
	}
	h.mu.Unlock()
	for _, c := range claims {
		h.route(&wire.Routed{FromHub: h.id, ToHub: to, TTL: routedTTL, Msg: &wire.Message{Kind: wire.KAddrClaim, AddrClaim: c}})
	}
}
