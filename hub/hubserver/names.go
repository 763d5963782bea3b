package hubserver

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/wire"
)

// Node names are unique across the overlay: an identity (pki.Peer.Owner)
// never takes a name another identity's node holds. A hub admitting a
// node under a name
//
//  1. refuses a name the node's certificate does not certify
//     (pki.Peer.MayUse: in a grid with a CA a hub's or node's certificate
//     binds its name);
//  2. judges the name's holders among its own nodes and the nodes it is
//     admitting, then asks every hub it has a route to (routed
//     wire.KClaim), which judge their holders alike and answer
//     (wire.KClaimed), for at most lookupWait: a hub that does not answer
//     in time is not waited for, nor is one whose route becomes
//     unreachable while the claim waits (unreachedLocked: a dead hub's
//     stale route no longer holds a re-attaching node for lookupWait);
//  3. admits the node unless a holder keeps the name (keeps), and refuses
//     it naming the holder and its hub otherwise.
//
// Of two holdings of a name by different identities the one that keeps
// it is, in this order: the one whose certificate certifies the name
// (Bound), the admitted one (Attached) over one being admitted, the
// earlier one (SinceMs), the lower node ID. Both hubs apply the rule to
// the same facts (a claim carries the claimant's, an answer the
// holder's), so when two hubs admit two nodes under one name at the same
// time, the same one keeps it at both: each hub registers its claim
// before asking, so at least one of the two sees the other. A hub whose
// admitted node loses its name (to a node whose certificate certifies
// it) sends it a refusal on its link and closes it.

// sameName says whether two names are one: names are compared without
// regard to case, as lookups match them (NAME.grid is a DNS-like name),
// so no identity holds "SRVHOME" while another holds "srvhome".
func sameName(a, b string) bool { return strings.EqualFold(a, b) }

// claim is a node being admitted under a name: its holding, the hubs yet
// to answer and, once it lost, the refusal.
type claim struct {
	name    string
	holding wire.Holding
	waiting map[identity.ID]bool
	lost    *hub.RefusedError
	done    chan struct{} // closed once every hub answered or the claim lost
}

// keeps reports whether holding a keeps the name against b.
func keeps(a, b *wire.Holding) bool {
	switch {
	case a.Bound != b.Bound:
		return a.Bound
	case a.Attached != b.Attached:
		return a.Attached
	case a.SinceMs != b.SinceMs:
		return a.SinceMs < b.SinceMs
	}
	return bytes.Compare(a.Node.ID[:], b.Node.ID[:]) < 0
}

// takenBy is the refusal of a name that holder keeps.
func takenBy(name string, holder *wire.Holding) *hub.RefusedError {
	at := holder.Node.HubName
	if at == "" {
		at = holder.Node.Hub.Short()
	}
	who := "node " + holder.Node.ID.Short()
	if holder.Owner != holder.Node.ID.String() { // a grid with a CA: the subject too
		who = holder.Owner + " (" + who + ")"
	}
	return &hub.RefusedError{Code: wire.RefusedNameTaken, Holder: holder.Node,
		Reason: fmt.Sprintf("the name %q is held by another identity: %s at hub %s", name, who, at)}
}

// holdingLocked is an attached node's holding; h.mu is held.
func (p *peer) holdingLocked() wire.Holding {
	return wire.Holding{Node: p.machine, Owner: p.owner, Bound: p.bound, Attached: true, SinceMs: p.since.UnixMilli()}
}

// admitName decides whether peer p, whose handshake proved who, may go by
// the name of its hello (a hub: whether its certificate certifies it); nil
// admits it, with p.claim set for register to take.
func (h *Hub) admitName(p *peer, who pki.Peer) *hub.RefusedError {
	name := p.machine.Name
	if err := who.MayUse(name); err != nil {
		return &hub.RefusedError{Code: wire.RefusedName, Reason: err.Error()}
	}
	p.owner, p.bound, p.since = who.Owner(), who.Binds(name), time.Now()
	if name == "" || p.isHub {
		return nil // hub names are bound by certificates, not claimed
	}
	cl := &claim{name: name, waiting: map[identity.ID]bool{}, done: make(chan struct{})}
	cl.holding = wire.Holding{Node: p.machine, Owner: p.owner, Bound: p.bound, SinceMs: p.since.UnixMilli()}
	h.mu.Lock()
	evict, lost := h.judgeLocked(&cl.holding, p.id)
	if lost != nil {
		h.mu.Unlock()
		return lost
	}
	for id, r := range h.routes {
		if r.next != nil {
			cl.waiting[id] = true
		}
	}
	qid := h.queryID.Add(1)
	h.claims[qid] = cl
	targets := make([]identity.ID, 0, len(cl.waiting))
	for id := range cl.waiting {
		targets = append(targets, id)
	}
	if len(targets) == 0 {
		close(cl.done)
	}
	h.mu.Unlock()
	h.evict(evict, name, &cl.holding)
	for _, id := range targets {
		h.route(&wire.Routed{FromHub: h.id, ToHub: id, TTL: routedTTL,
			Msg: &wire.Message{Kind: wire.KClaim, Claim: &wire.Claim{Query: qid, Name: name, Holding: cl.holding}}})
	}
	t := time.NewTimer(lookupWait)
	defer t.Stop()
	select {
	case <-cl.done:
	case <-t.C:
	case <-h.ctx.Done():
	}
	p.claim, p.claimQ = cl, qid
	h.mu.Lock()
	lost = cl.lost
	if lost != nil {
		delete(h.claims, qid)
	}
	h.mu.Unlock()
	return lost
}

// judgeLocked judges a holding of a name (of node id) against the holders
// here: the attached nodes and the claims being admitted of other
// identities. It returns the attached nodes that lose the name, and the
// refusal if a holder here keeps it; the claims that lose are marked
// lost. h.mu is held.
func (h *Hub) judgeLocked(c *wire.Holding, id identity.ID) (evict []*peer, lost *hub.RefusedError) {
	name := c.Node.Name
	for _, n := range h.nodes {
		if !sameName(n.machine.Name, name) || n.owner == c.Owner || n.id == id {
			continue
		}
		hold := n.holdingLocked()
		if keeps(&hold, c) {
			return nil, takenBy(name, &hold)
		}
		evict = append(evict, n)
	}
	for _, o := range h.claims {
		if !sameName(o.name, name) || o.holding.Owner == c.Owner || o.holding.Node.ID == id || o.lost != nil {
			continue
		}
		if keeps(&o.holding, c) {
			return nil, takenBy(name, &o.holding)
		}
	}
	// c keeps the name against every holder here: the claims being
	// admitted lose it.
	for _, o := range h.claims {
		if sameName(o.name, name) && o.holding.Owner != c.Owner && o.holding.Node.ID != id && o.lost == nil {
			o.lose(takenBy(name, c))
		}
	}
	return evict, nil
}

// unreachedLocked stops the claims (of names, and of virtual addresses)
// waiting for hubs that have no reachable route any more: such a hub
// counts as having answered with no holder, as one that does not answer
// in time does. A holder there is
// found when the hub becomes reachable again (reclaim), and the rule
// decides as for any claim. h.mu is held.
func (h *Hub) unreachedLocked() {
	for _, cl := range h.claims {
		if cl.lost != nil || len(cl.waiting) == 0 {
			continue
		}
		for id := range cl.waiting {
			if r := h.routes[id]; r == nil || r.next == nil {
				delete(cl.waiting, id)
			}
		}
		if len(cl.waiting) == 0 {
			close(cl.done)
		}
	}
	for _, cl := range h.vip.claims { // virtual addresses alike (vipaddr.go)
		if cl.lost != nil || len(cl.waiting) == 0 {
			continue
		}
		for id := range cl.waiting {
			if r := h.routes[id]; r == nil || r.next == nil {
				delete(cl.waiting, id)
			}
		}
		if len(cl.waiting) == 0 {
			close(cl.done)
		}
	}
}

func (cl *claim) lose(e *hub.RefusedError) {
	cl.lost = e
	select {
	case <-cl.done:
	default:
		close(cl.done)
	}
}

// evict tells attached nodes that lost their name to holder, and closes
// their links.
func (h *Hub) evict(nodes []*peer, name string, holder *wire.Holding) {
	for _, n := range nodes {
		e := takenBy(name, holder)
		h.logf("hub %s: %s loses its name: %v", h.cfg.Name, n.t.Desc(), e)
		n.t.SendControl(e.Message())
		n.t.CloseAfterFlush(time.Second, e)
	}
}

// reclaim tells a hub that just became reachable the names of this hub's
// nodes (claims of query 0, answered like any other): if both hubs
// admitted nodes of different identities under one name while they could
// not reach each other, or while one did not answer in time, each applies
// the rule to both holdings and the node that loses is refused, at its
// own hub. The names of nodes being admitted whose claims no longer wait
// go too (their node may be registered before the answer comes).
//
// A hub that says it holds no nodes is not told (routing.go applyAds):
// it has no holder to judge them against. If its count was late, it is
// told once the count says some, within an interval (route.reclaimDue);
// its claims in flight are sent here (widenClaims), and a node it
// admitted without our answer is told here after (claimFollowUp). Before, a
// hub that restarted was told every name of the overlay at once (make
// scale: 10,000 claims to one hub; 1,000,000 at 1,000 hubs).
func (h *Hub) reclaim(hub identity.ID) {
	h.mu.Lock()
	var claims []*wire.Claim
	for _, n := range h.nodes {
		if n.machine.Name != "" {
			claims = append(claims, &wire.Claim{Name: n.machine.Name, Holding: n.holdingLocked()})
		}
	}
	for _, cl := range h.claims {
		if cl.lost == nil && closed(cl.done) {
			claims = append(claims, &wire.Claim{Name: cl.name, Holding: cl.holding})
		}
	}
	h.mu.Unlock()
	h.reclaimed.Add(int64(len(claims)))
	for _, c := range claims {
		h.route(&wire.Routed{FromHub: h.id, ToHub: hub, TTL: routedTTL, Msg: &wire.Message{Kind: wire.KClaim, Claim: c}})
	}
}

// claimFollowUp runs once node p is registered with claim cl (nil: none):
// when the claim ended without every hub's answer (lookupWait passed, or
// an answer was lost because that hub had no route back yet), the hubs
// that did not answer are told the name as in a reclaim, and a holder
// there that keeps it has p refused. Reclaims alone would miss it when
// the hubs met while this one held no nodes (reclaim, route.reclaimDue).
func (h *Hub) claimFollowUp(p *peer, cl *claim) {
	if cl == nil {
		return
	}
	h.mu.Lock()
	var to []identity.ID
	for id := range cl.waiting {
		if r := h.routes[id]; r != nil && r.next != nil {
			to = append(to, id)
		}
	}
	c := &wire.Claim{Name: p.machine.Name, Holding: p.holdingLocked()}
	h.mu.Unlock()
	for _, id := range to {
		h.route(&wire.Routed{FromHub: h.id, ToHub: id, TTL: routedTTL, Msg: &wire.Message{Kind: wire.KClaim, Claim: c}})
	}
}

// widenClaims has the claims of names and virtual addresses still
// waiting for answers wait for a hub that just became reachable too, and
// sends them to it: a holder there is judged before the node is
// admitted, whether or not either hub reclaims at the other.
func (h *Hub) widenClaims(to identity.ID) {
	var msgs []*wire.Message
	h.mu.Lock()
	for qid, cl := range h.claims {
		if cl.lost == nil && !closed(cl.done) && !cl.waiting[to] {
			cl.waiting[to] = true
			msgs = append(msgs, &wire.Message{Kind: wire.KClaim, Claim: &wire.Claim{Query: qid, Name: cl.name, Holding: cl.holding}})
		}
	}
	for qid, cl := range h.vip.claims {
		if cl.lost == nil && !closed(cl.done) && !cl.waiting[to] {
			cl.waiting[to] = true
			msgs = append(msgs, &wire.Message{Kind: wire.KAddrClaim, AddrClaim: &wire.AddrClaim{Query: qid, Addr: cl.addr, Holding: cl.holding}})
		}
	}
	h.mu.Unlock()
	for _, m := range msgs {
		h.route(&wire.Routed{FromHub: h.id, ToHub: to, TTL: routedTTL, Msg: m})
	}
}

// closed reports whether c is closed.
func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// claimed answers another hub's claim: this hub's holders of the name,
// after judging the claim against them (its nodes that lose the name are
// told, its claims that lose are refused).
func (h *Hub) claimed(r *wire.Routed) {
	c := r.Msg.Claim
	if c.Holding.Node.Name != c.Name {
		return
	}
	h.mu.Lock()
	var holders []wire.Holding
	for _, n := range h.nodes {
		if sameName(n.machine.Name, c.Name) && n.owner != c.Holding.Owner && len(holders) < 16 {
			holders = append(holders, n.holdingLocked())
		}
	}
	for _, o := range h.claims {
		if sameName(o.name, c.Name) && o.holding.Owner != c.Holding.Owner && o.lost == nil && len(holders) < 16 {
			holders = append(holders, o.holding)
		}
	}
	evict, _ := h.judgeLocked(&c.Holding, c.Holding.Node.ID)
	h.mu.Unlock()
	h.evict(evict, c.Name, &c.Holding)
	h.route(&wire.Routed{FromHub: h.id, ToHub: r.FromHub, TTL: routedTTL,
		Msg: &wire.Message{Kind: wire.KClaimed, Claimed: &wire.Claimed{Query: c.Query, Holders: holders}}})
}

// answerClaim takes a hub's answer to one of our claims. For a reclaim
// (query 0), or a claim no longer waiting (its node admitted when the
// answer was late), our nodes that lose their names to the admitted
// holders there are refused.
func (h *Hub) answerClaim(from identity.ID, a *wire.Claimed) {
	h.mu.Lock()
	waiting := h.claims[a.Query] != nil
	h.mu.Unlock()
	if a.Query == 0 || !waiting {
		for i := range a.Holders {
			o := &a.Holders[i]
			if o.Node.Hub != from || !o.Attached {
				continue
			}
			h.mu.Lock()
			var evict []*peer
			for _, n := range h.nodes {
				if hold := n.holdingLocked(); sameName(n.machine.Name, o.Node.Name) && n.owner != o.Owner && keeps(o, &hold) {
					evict = append(evict, n)
				}
			}
			h.mu.Unlock()
			h.evict(evict, o.Node.Name, o)
		}
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	cl := h.claims[a.Query]
	if cl == nil || !cl.waiting[from] || cl.lost != nil {
		return
	}
	delete(cl.waiting, from)
	for i := range a.Holders {
		o := &a.Holders[i]
		if !sameName(o.Node.Name, cl.name) || o.Owner == cl.holding.Owner || o.Node.Hub != from {
			continue
		}
		if keeps(o, &cl.holding) {
			cl.lose(takenBy(cl.name, o))
			return
		}
	}
	if len(cl.waiting) == 0 {
		close(cl.done)
	}
}
