package hubserver

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

const (
	// lookupWait bounds how long a hub waits for other hubs' answers.
	lookupWait = 2 * time.Second
	// routedTTL is the TTL of routed messages a hub originates.
	routedTTL = hub.RoutedTTL
)

// control handles a control message from a peer.
func (h *Hub) control(p *peer, m *wire.Message) error {
	m = p.fromHost(m) // hostscope.go
	switch {
	case m.Kind == wire.KGossip && p.isHub:
		h.queueGossip(p, m.Gossip) // routing.go
	case m.Kind == wire.KCRL && p.isHub:
		h.takeCRL(p, m.CRL)
	case m.Kind == wire.KRouted:
		r := m.Routed
		if !p.isHub {
			// A node speaks for itself only.
			r.FromHub, r.FromNode = h.id, p.id
		}
		h.route(r)
	case m.Kind == wire.KLookup && !p.isHub:
		h.lookup(p, m.Lookup)
	case m.Kind == wire.KHubs && !p.isHub:
		h.answerHubs(p, m.Hubs)
	case m.Kind == wire.KMachine && !p.isHub:
		return h.updateNode(p, m.Machine)
	case m.Kind == wire.KMoved && !p.isHub:
		h.nodeMoved(p, m.Moved)
	case m.Kind == wire.KVirtual && !p.isHub:
		h.claimVirtual(p, m.Virtual)
	case m.Kind == wire.KLookupAddr && !p.isHub:
		h.lookupAddr(p, m.LookupAddr)
	default:
		role := "node"
		if p.isHub {
			role = "hub"
		}
		return fmt.Errorf("unexpected %s message from a %s", m.Kind, role)
	}
	return nil
}

// route delivers a routed message here or sends it on toward its hub.
func (h *Hub) route(r *wire.Routed) {
	if r.ToHub.IsZero() || r.ToHub == h.id {
		if r.ToNode.IsZero() {
			h.hubMessage(r)
			return
		}
		h.mu.Lock()
		n := h.nodes[r.ToNode]
		h.mu.Unlock()
		if n == nil {
			h.undeliverable(r, wire.FailNotAttached, fmt.Sprintf("node %s is not attached to hub %s", r.ToNode.Short(), h.cfg.Name))
			return
		}
		n.send(&wire.Message{Kind: wire.KRouted, Routed: r})
		return
	}
	if r.TTL <= 0 {
		h.undeliverable(r, wire.FailNoHubRoute, fmt.Sprintf("hub %s: too many hops on the way to hub %s", h.cfg.Name, h.hubName(r.ToHub)))
		return
	}
	r.TTL--
	next := h.nextHop(r.ToHub)
	if next == nil {
		h.undeliverable(r, wire.FailNoHubRoute, fmt.Sprintf("hub %s: no route to hub %s", h.cfg.Name, h.hubName(r.ToHub)))
		return
	}
	next.send(&wire.Message{Kind: wire.KRouted, Routed: r})
}

// undeliverable drops a routed message; a node's reverse request or splice
// offer gets a failure back (code: a wire.Fail code), so that its sender
// need not wait for a timeout.
func (h *Hub) undeliverable(r *wire.Routed, code, why string) {
	if r.FromNode.IsZero() {
		return
	}
	var fail *wire.Message
	switch {
	case r.Msg.Kind == wire.KReverse:
		fail = &wire.Message{Kind: wire.KReverseFail, Fail: &wire.Fail{Token: r.Msg.Reverse.Token, Reason: why, Code: code}}
	case r.Msg.Kind == wire.KSplice && r.Msg.Splice != nil:
		fail = &wire.Message{Kind: wire.KSpliceFail, Fail: &wire.Fail{Token: r.Msg.Splice.Token, Reason: why, Code: code}}
	default:
		return
	}
	h.route(&wire.Routed{FromHub: h.id, ToHub: r.FromHub, ToNode: r.FromNode, TTL: routedTTL, Msg: fail})
}

// hubMessage handles a routed message for this hub itself.
func (h *Hub) hubMessage(r *wire.Routed) {
	switch r.Msg.Kind {
	case wire.KLookup:
		h.route(&wire.Routed{FromHub: h.id, ToHub: r.FromHub, ToNode: r.FromNode, TTL: routedTTL,
			Msg: &wire.Message{Kind: wire.KFound, Found: &wire.Found{Query: r.Msg.Lookup.Query, Matches: h.localMatches(r.Msg.Lookup.Node)}}})
	case wire.KFound, wire.KClaim, wire.KClaimed:
		if !r.FromNode.IsZero() {
			// hubs' business: a node's answer or claim would
			// spoof lookups or evict the holders of names.
			h.logf("hub %s: dropping a %s message from node %s: only hubs send those", h.cfg.Name, r.Msg.Kind, r.FromNode.Short())
			return
		}
		switch r.Msg.Kind {
		case wire.KFound:
			h.answer(r.FromHub, r.Msg.Found)
		case wire.KClaim:
			h.claimed(r)
		default:
			h.answerClaim(r.FromHub, r.Msg.Claimed)
		}
	case wire.KSplice, wire.KSpliceReply, wire.KSpliceGo, wire.KSpliceFail:
		h.spliceMessage(r)
	case wire.KLookupAddr, wire.KAddrClaim, wire.KAddrClaimed:
		h.vipMessage(r) // viplookup.go
	}
}

// localMatches lists the attached nodes whose name or ID is name.
func (h *Hub) localMatches(name string) []identity.Machine {
	id, idErr := identity.ParseID(strings.ToLower(name))
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []identity.Machine
	if idErr == nil {
		if p := h.nodes[id]; p != nil && p.movedTo.IsZero() {
			out = append(out, h.withVirtualLocked(p))
		}
		return out
	}
	ip, ipErr := netip.ParseAddr(name)
	for _, p := range h.nodes {
		if len(out) >= 64 {
			break
		}
		if !p.movedTo.IsZero() {
			continue // found at the hub it moved to
		}
		if p.machine.Name == name || (ipErr == nil && hasAddr(p.machine, ip.Unmap())) {
			out = append(out, h.withVirtualLocked(p))
		}
	}
	if len(out) == 0 && ipErr != nil {
		// names are matched in any case (as DNS names, NAME.grid) when
		// none matches exactly.
		for _, p := range h.nodes {
			if len(out) < 64 && p.movedTo.IsZero() && strings.EqualFold(p.machine.Name, name) {
				out = append(out, h.withVirtualLocked(p))
			}
		}
	}
	return out
}

// hasAddr reports whether m lists ip among its addresses or those hubs
// observed for it (a virtual address may name a node by an IP address).
func hasAddr(m identity.Machine, ip netip.Addr) bool {
	for _, list := range [][]netip.AddrPort{m.Addrs, m.Observed} {
		for _, a := range list {
			if a.Addr().Unmap() == ip {
				return true
			}
		}
	}
	return false
}

// query is a lookup a hub is asking the other hubs about for a node.
type query struct {
	node    *peer
	nodeQ   uint64
	waiting map[identity.ID]bool
	matches []identity.Machine
	timer   *time.Timer
	// for an answer without match (wire.Found.Answered, Unreached): the
	// hubs asked, by name, and those without a route when asked.
	names   map[identity.ID]string
	noRoute []wire.HubUnreached
}

// lookup answers a node's lookup from the attached nodes, or else asks
// every reachable hub and answers with the first match that comes back
// (or nothing, once all have answered or lookupWait has passed).
func (h *Hub) lookup(p *peer, lk *wire.Lookup) {
	h.askHubs(p, lk.Query, h.localMatches(lk.Node), func(qid uint64) *wire.Message {
		return &wire.Message{Kind: wire.KLookup, Lookup: &wire.Lookup{Query: qid, Node: lk.Node}}
	})
}

// askHubs answers node p's query nodeQ with local when it has matches, or
// else asks every reachable hub (ask makes the question for our query
// number) and answers once they have (finishQuery), or at lookupWait.
func (h *Hub) askHubs(p *peer, nodeQ uint64, local []identity.Machine, ask func(qid uint64) *wire.Message) {
	if len(local) > 0 {
		p.send(&wire.Message{Kind: wire.KFound, Found: &wire.Found{Query: nodeQ, Matches: local}})
		return
	}
	q := &query{node: p, nodeQ: nodeQ, waiting: map[identity.ID]bool{}, names: map[identity.ID]string{}}
	h.mu.Lock()
	for id, r := range h.routes {
		if r.next != nil {
			q.waiting[id] = true
			q.names[id] = r.name
		} else if len(q.noRoute) < wire.MaxUnreached {
			u := wire.HubUnreached{Hub: id, Name: r.name, Cause: wire.UnreachedRoute}
			if !r.updated.IsZero() {
				u.SinceMs = r.updated.UnixMilli()
			}
			q.noRoute = append(q.noRoute, u)
		}
	}
	h.mu.Unlock()
	if len(q.waiting) == 0 {
		p.send(&wire.Message{Kind: wire.KFound, Found: q.notFound()})
		return
	}
	qid := h.queryID.Add(1)
	targets := make([]identity.ID, 0, len(q.waiting))
	for id := range q.waiting {
		targets = append(targets, id)
	}
	h.lookups.Lock()
	h.lookups.pending[qid] = q
	q.timer = time.AfterFunc(lookupWait, func() { h.finishQuery(qid) })
	h.lookups.Unlock()
	for _, id := range targets {
		h.route(&wire.Routed{FromHub: h.id, ToHub: id, TTL: routedTTL, Msg: ask(qid)})
	}
}

// answer records a hub's answer to one of our queries.
func (h *Hub) answer(from identity.ID, f *wire.Found) {
	h.lookups.Lock()
	q := h.lookups.pending[f.Query]
	if q == nil || !q.waiting[from] {
		h.lookups.Unlock()
		return
	}
	delete(q.waiting, from)
	for _, m := range f.Matches {
		if len(q.matches) < 64 {
			q.matches = append(q.matches, m)
		}
	}
	// Names are unique in a job and IDs always: the first hub that has the
	// node ends the query, so a lookup costs one round trip to the node's
	// hub, not to the farthest hub.
	done := len(q.waiting) == 0 || len(f.Matches) > 0
	h.lookups.Unlock()
	if done {
		h.finishQuery(f.Query)
	}
}

func (h *Hub) finishQuery(qid uint64) {
	h.lookups.Lock()
	q := h.lookups.pending[qid]
	delete(h.lookups.pending, qid)
	h.lookups.Unlock()
	if q == nil {
		return
	}
	q.timer.Stop()
	f := &wire.Found{Query: q.nodeQ, Matches: q.matches}
	if len(q.matches) == 0 {
		f = q.notFound()
	}
	q.node.send(&wire.Message{Kind: wire.KFound, Found: f})
}

// notFound is q's answer without match: the hubs that answered (this one
// included) and those that could not be asked, by name (no route when
// asked, or still waited for: no answer within lookupWait). Its q is no
// longer pending (or never was).
func (q *query) notFound() *wire.Found {
	f := &wire.Found{Query: q.nodeQ, Answered: 1 + len(q.names) - len(q.waiting)}
	f.Unreached = append(f.Unreached, q.noRoute...)
	for id := range q.waiting {
		if len(f.Unreached) < wire.MaxUnreached {
			f.Unreached = append(f.Unreached, wire.HubUnreached{Hub: id, Name: q.names[id], Cause: wire.UnreachedNoAnswer, WaitMs: lookupWait.Milliseconds()})
		}
	}
	slices.SortFunc(f.Unreached, func(a, b wire.HubUnreached) int { return strings.Compare(a.Name, b.Name) })
	return f
}
