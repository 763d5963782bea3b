package hubserver

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// The directory of virtual addresses (issue 19; wire/vipaddr.go has the
// messages, package hub the node's side). An attached node claims one
// IPv4 and one IPv6 address (wire.KVirtual); they are unique across the
// overlay as names are (names.go), by the same machinery:
//
//  1. the hub judges each address claimed against its holders here: the
//     attached nodes that hold it and the claims of it under way;
//  2. it asks every hub it has a route to (routed wire.KAddrClaim), which
//     judge the claim alike and answer with their holders
//     (wire.KAddrClaimed), for at most lookupWait and not for a hub
//     whose route goes unreachable meanwhile (names.go's unreachedLocked);
//  3. the node holds each address no other node keeps; the verdict
//     (wire.KVirtualAck) names each address refused and its holder, in
//     the words the hub logs.
//
// Of two holdings of an address by different nodes (node IDs: two nodes
// of one owner may not share an address either) the one that keeps it is
// the held one over one being claimed, then the earlier, then the lower
// node ID: names.go's keeps, with Bound always false (a certificate does
// not bind a virtual address yet: until it does, the first claimant keeps
// an address, even one it has no right to). When two hubs meet (a route
// appears), each sends the other its held addresses (claims of query 0):
// a node that loses one is told (a KVirtualAck of query 0) and keeps its
// link. A node that leaves frees its addresses.
//
// A lookup by name answers with the node's virtual addresses
// (identity.Machine.Virtual, withVirtualLocked): exactly those this
// directory gives it, never what the node says of itself; a peer older
// than wire.VersionVirtual gets the answer without them (peer.send).
//
// The hub keeps addresses unique, one IPv4 and one IPv6 per node, refuses
// what no node may hold (wire.CheckVirtualAddr) and what lies outside the
// grid's virtual prefixes (Config.VirtualPrefixes: outsidePrefixes), so
// that no node holds an underlay address that NAME.grid and lookups by
// address would then give out; the node is told (wire.AddrOutside) and
// the hub logs it.

// vipDir is the hub's part of the directory, under h.mu.
type vipDir struct {
	held   map[netip.Addr]*vipHold // addresses held by attached nodes
	claims map[uint64]*addrClaim   // addresses being claimed, by query
	busy   map[*peer]bool          // nodes with a claim under way
	queued map[*peer]*wire.Virtual // a node's claim sent before the one under way was answered
	nodes  map[*peer][2]netip.Addr // what each node holds (v4, v6)
}

type vipHold struct {
	p     *peer
	since time.Time
}

// addrClaim is one address being claimed for a node: its holding, the
// hubs yet to answer and, once it lost, why.
type addrClaim struct {
	addr    netip.Addr
	holding wire.Holding
	waiting map[identity.ID]bool
	lost    *wire.AddrTaken
	done    chan struct{}
}

func (cl *addrClaim) lose(t wire.AddrTaken) {
	cl.lost = &t
	select {
	case <-cl.done:
	default:
		close(cl.done)
	}
}

// vipLocked is the directory with its maps made; h.mu is held.
func (h *Hub) vipLocked() *vipDir {
	d := &h.vip
	if d.held == nil {
		d.held = map[netip.Addr]*vipHold{}
		d.claims = map[uint64]*addrClaim{}
		d.busy = map[*peer]bool{}
		d.queued = map[*peer]*wire.Virtual{}
		d.nodes = map[*peer][2]netip.Addr{}
	}
	return d
}

// addrTaken is the refusal of address a, which holder keeps.
func addrTaken(a netip.Addr, holder *wire.Holding) wire.AddrTaken {
	at := holder.Node.HubName
	if at == "" {
		at = holder.Node.Hub.Short()
	}
	who := "node " + holder.Node.ID.Short()
	if holder.Node.Name != "" {
		who = "node " + holder.Node.Name + " (" + holder.Node.ID.Short() + ")"
	}
	return wire.AddrTaken{Addr: a, Holder: holder.Node,
		Reason: fmt.Sprintf("the virtual address %s is held by another node: %s at hub %s", a, who, at)}
}

// holdingLocked is an attached node's holding of an address; h.mu is held.
func (hd *vipHold) holdingLocked() wire.Holding {
	return wire.Holding{Node: hd.p.machine, Owner: ownerOf(hd.p), Attached: true, SinceMs: hd.since.UnixMilli()}
}

func ownerOf(p *peer) string {
	if p.owner == "" {
		return p.id.String()
	}
	return p.owner
}

// liveLocked reports whether the holder of hd is still attached; h.mu is
// held.
func (h *Hub) liveLocked(hd *vipHold) bool { return hd != nil && h.nodes[hd.p.id] == hd.p }

// judgeAddrLocked judges a holding c of address a against its holders
// here. It returns the attached nodes that lose the address (released
// here; the caller tells them), and the refusal if a holder here keeps
// it; the claims that lose are marked lost. h.mu is held.
func (h *Hub) judgeAddrLocked(a netip.Addr, c *wire.Holding) (evict []*peer, lost *wire.AddrTaken) {
	d := h.vipLocked()
	if hd := d.held[a]; h.liveLocked(hd) && hd.p.id != c.Node.ID {
		hold := hd.holdingLocked()
		if keeps(&hold, c) {
			t := addrTaken(a, &hold)
			return nil, &t
		}
		evict = append(evict, hd.p)
	}
	for _, o := range d.claims {
		if o.addr == a && o.holding.Node.ID != c.Node.ID && o.lost == nil && keeps(&o.holding, c) {
			t := addrTaken(a, &o.holding)
			return nil, &t
		}
	}
	for _, o := range d.claims {
		if o.addr == a && o.holding.Node.ID != c.Node.ID && o.lost == nil {
			o.lose(addrTaken(a, c))
		}
	}
	for _, p := range evict {
		h.dropAddrLocked(p, a)
	}
	return evict, nil
}

// dropAddrLocked releases node p's hold on a; h.mu is held.
func (h *Hub) dropAddrLocked(p *peer, a netip.Addr) {
	d := h.vipLocked()
	if hd := d.held[a]; hd != nil && hd.p == p {
		delete(d.held, a)
	}
	both := d.nodes[p]
	for i := range both {
		if both[i] == a {
			both[i] = netip.Addr{}
		}
	}
	d.nodes[p] = both
}

// vipReleaseLocked frees the addresses of a node whose link ended; h.mu
// is held.
func (h *Hub) vipReleaseLocked(p *peer) {
	d := h.vipLocked()
	for _, a := range d.nodes[p] {
		if hd := d.held[a]; hd != nil && hd.p == p {
			delete(d.held, a)
		}
	}
	delete(d.nodes, p)
	delete(d.busy, p)
	delete(d.queued, p)
}

// tellLost tells nodes that lost address a to holder, and logs it; they
// keep their links.
func (h *Hub) tellLost(nodes []*peer, a netip.Addr, holder *wire.Holding) {
	for _, n := range nodes {
		t := addrTaken(a, holder)
		h.logf("hub %s: node %s (%s) loses its virtual address: %s", h.cfg.Name, n.name, n.id.Short(), t.Reason)
		h.mu.Lock()
		both := h.vipLocked().nodes[n]
		h.mu.Unlock()
		n.t.SendControl(&wire.Message{Kind: wire.KVirtualAck, VirtualAck: &wire.VirtualAck{V4: both[0], V6: both[1], Taken: []wire.AddrTaken{t}}})
	}
}

// claimVirtual takes a node's claim of its virtual addresses: judged in
// the background (it may wait for other hubs), the verdict sent on its
// link. A node's claims are judged one at a time, in order; of those
// sent while one is judged only the last is (the node gave up waiting
// for the others).
func (h *Hub) claimVirtual(p *peer, v *wire.Virtual) {
	h.mu.Lock()
	d := h.vipLocked()
	if d.busy[p] {
		d.queued[p] = v
		h.mu.Unlock()
		return
	}
	d.busy[p] = true
	h.mu.Unlock()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for v != nil {
			h.runClaim(p, v)
			v = h.nextClaim(p)
		}
	}()
}

// nextClaim is the claim node p sent while one was judged, if any.
func (h *Hub) nextClaim(p *peer) *wire.Virtual {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.vipLocked()
	if v := d.queued[p]; v != nil && h.nodes[p.id] == p {
		delete(d.queued, p)
		return v
	}
	delete(d.busy, p)
	delete(d.queued, p)
	return nil
}

func (h *Hub) runClaim(p *peer, v *wire.Virtual) {
	since := time.Now()
	var taken []wire.AddrTaken
	var evicted []struct {
		nodes []*peer
		addr  netip.Addr
		by    wire.Holding
	}
	h.mu.Lock()
	d := h.vipLocked()
	if h.nodes[p.id] != p {
		h.mu.Unlock()
		return
	}
	mine := d.nodes[p]
	var cls []*addrClaim
	var qids []uint64
	for _, a := range []netip.Addr{v.V4, v.V6} {
		if !a.IsValid() || (d.held[a] != nil && d.held[a].p == p) {
			continue // none, or held already
		}
		if t := h.outsidePrefixes(a); t != nil {
			taken = append(taken, *t)
			continue
		}
		hold := wire.Holding{Node: p.machine, Owner: ownerOf(p), SinceMs: since.UnixMilli()}
		evict, lost := h.judgeAddrLocked(a, &hold)
		if lost != nil {
			taken = append(taken, *lost)
			continue
		}
		if len(evict) > 0 { // only an attached holding evicts: not a claim's
			evicted = append(evicted, struct {
				nodes []*peer
				addr  netip.Addr
				by    wire.Holding
			}{evict, a, hold})
		}
		cl := &addrClaim{addr: a, holding: hold, waiting: map[identity.ID]bool{}, done: make(chan struct{})}
		for id, r := range h.routes {
			if r.next != nil {
				cl.waiting[id] = true
			}
		}
		if len(cl.waiting) == 0 {
			close(cl.done)
		}
		qid := h.queryID.Add(1)
		d.claims[qid] = cl
		cls, qids = append(cls, cl), append(qids, qid)
	}
	var targets []identity.ID
	for _, cl := range cls {
		for id := range cl.waiting {
			targets = append(targets, id)
		}
		break // every claim asks the same hubs
	}
	h.mu.Unlock()
	for _, e := range evicted {
		h.tellLost(e.nodes, e.addr, &e.by)
	}
	for i, cl := range cls {
		for _, id := range targets {
			h.route(&wire.Routed{FromHub: h.id, ToHub: id, TTL: routedTTL,
				Msg: &wire.Message{Kind: wire.KAddrClaim, AddrClaim: &wire.AddrClaim{Query: qids[i], Addr: cl.addr, Holding: cl.holding}}})
		}
	}
	// one wait of lookupWait for the answers to all of them: once it is
	// over, none is waited for (a hub that never answers, its trunk gone
	// silent or its answer lost, holds up no verdict).
	wait, cancel := context.WithTimeout(h.ctx, lookupWait)
	defer cancel()
	for _, cl := range cls {
		select {
		case <-cl.done:
		case <-wait.Done():
		}
	}

	// The verdict: the node holds what it won of this claim, and what it
	// held and claimed again.
	h.mu.Lock()
	won := map[netip.Addr]bool{}
	for i, cl := range cls {
		delete(d.claims, qids[i])
		if cl.lost != nil {
			taken = append(taken, *cl.lost)
		} else if hd := d.held[cl.addr]; h.liveLocked(hd) && hd.p != p {
			hold := hd.holdingLocked()
			taken = append(taken, addrTaken(cl.addr, &hold))
		} else {
			won[cl.addr] = true
		}
	}
	if h.nodes[p.id] != p {
		h.mu.Unlock()
		return
	}
	var now [2]netip.Addr
	for i, a := range []netip.Addr{v.V4, v.V6} {
		if a.IsValid() && (won[a] || (mine[i] == a && d.held[a] != nil && d.held[a].p == p)) {
			now[i] = a
		}
	}
	for _, a := range mine {
		if a.IsValid() && a != now[0] && a != now[1] {
			h.dropAddrLocked(p, a)
		}
	}
	for a := range won {
		d.held[a] = &vipHold{p: p, since: since}
	}
	d.nodes[p] = now
	h.mu.Unlock()
	for _, tk := range taken {
		h.logf("hub %s: node %s (%s): virtual address %s refused: %s", h.cfg.Name, p.name, p.id.Short(), tk.Addr, tk.Reason)
	}
	if len(won) > 0 {
		h.logf("hub %s: node %s (%s) holds virtual addresses %s", h.cfg.Name, p.name, p.id.Short(), addrList(now))
	}
	p.t.SendControl(&wire.Message{Kind: wire.KVirtualAck, VirtualAck: &wire.VirtualAck{Query: v.Query, V4: now[0], V6: now[1], Taken: taken}})
}

// outsidePrefixes is the refusal of a claim of a, when a lies outside
// the grid's virtual prefixes.
func (h *Hub) outsidePrefixes(a netip.Addr) *wire.AddrTaken {
	for _, p := range h.cfg.VirtualPrefixes {
		if p.Contains(a) {
			return nil
		}
	}
	return &wire.AddrTaken{Addr: a, Code: wire.AddrOutside,
		Reason: fmt.Sprintf("%s is outside the grid's virtual prefixes %v (the hubs' --vip-prefix; a node's --vip-prefix4/6 must lie in them)", a, h.cfg.VirtualPrefixes)}
}

// addrList is a node's addresses for a log line: "100.96.0.5 fd67:726c::5".
func addrList(both [2]netip.Addr) string {
	out := ""
	for _, a := range both {
		if a.IsValid() {
			if out != "" {
				out += " "
			}
			out += a.String()
		}
	}
	if out == "" {
		return "none"
	}
	return out
}
