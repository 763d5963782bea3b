package vip

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/gridlink/gridlink/identity"
)

// routeTTL is how long the answers of the directory are used before they
// are asked again (in the background: packets keep going to the node
// known meanwhile), so that an address that moved (a collision settled)
// is followed.
const routeTTL = time.Minute

// route is what the Network knows of a destination address.
type route struct {
	resolving  bool        // the first lookup is under way: packets wait in pending
	refreshing bool        // a later lookup is under way: packets go to id meanwhile
	id         identity.ID // when resolved
	at         time.Time   // when id was resolved
	none       time.Time   // when not zero: no node holds it until then
	pending    []*pbuf     // packets waiting for the first lookup
}

// outbound takes one packet read from the device, in the device's read
// buffer rb, and reports whether it kept rb (then the reader reads into
// a fresh one; a small packet is copied instead, buf.go). A packet
// larger than the tunnel
// MTU is answered with fragmentation needed / packet too big, IPv4
// packets without DF too: the tunnel never fragments, and the kernel
// lowers its path MTU on the answer and fragments or resegments itself.
func (n *Network) outbound(rb *pbuf) (kept bool) {
	pkt := rb.pkt()
	h, err := Parse(pkt)
	switch {
	case err != nil:
		n.drop(dropMalformed, "a malformed packet from the device", "err", err)
		return
	case !h.Dst.IsGlobalUnicast():
		n.drop(dropNotUnicast, "") // the kernel's own multicast and link-local chatter
		return
	case !n.ours(h.Src):
		n.drop(dropSourceNotOurs, "a packet from the device whose source is not this node's", "src", h.Src, "dst", h.Dst)
		return
	case len(pkt) > n.MTU():
		n.drop(dropTooBig, "")
		n.writeICMP(icmpTooBig(h, pkt, n.MTU()))
		return
	}
	if rules := n.rules.Load(); !rules.IsZero() {
		if t, err := transportOf(h, pkt); err == nil {
			n.flows.sent(h, t) // its answers pass the rules
		}
	}
	unreachable, kept := n.route(h, rb)
	if unreachable {
		n.drop(dropNoRoute, "")
		n.writeICMP(icmpUnreachable(h, pkt))
	}
	return kept
}

// route queues the packet in rb for the peer holding its destination, or
// for the lookup of that peer; it reports whether no node holds it (the
// caller answers, outside the lock) and whether it kept rb itself.
func (n *Network) route(h Header, rb *pbuf) (unreachable, kept bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := n.routes[h.Dst]
	if r != nil && !r.none.IsZero() && time.Now().After(r.none) {
		r = nil
	}
	if r == nil {
		if len(n.routes) >= maxRoutes {
			n.forgetRoutesLocked()
			if len(n.routes) >= maxRoutes {
				n.drop(dropNoRoute, "a packet: too many destinations", "dst", h.Dst)
				return false, false
			}
		}
		r = &route{resolving: true}
		n.routes[h.Dst] = r
		n.wg.Add(1)
		go n.resolve(h.Dst, r)
	}
	switch {
	case r.resolving:
		if len(r.pending) >= maxPending || n.pending >= maxPendingAll {
			n.drop(dropQueueFull, "")
			return false, false
		}
		rb.flow, rb.tcp = flowHash(h, rb.pkt()), h.Protocol == protoTCP
		pkt := own(rb)
		r.pending = append(r.pending, pkt)
		n.pending++
		return false, pkt == rb
	case !r.none.IsZero():
		return true, false
	default:
		if !r.refreshing && time.Since(r.at) > routeTTL {
			r.refreshing = true
			n.wg.Add(1)
			go n.resolve(h.Dst, r)
		}
		rb.flow, rb.tcp = flowHash(h, rb.pkt()), h.Protocol == protoTCP
		pkt := own(rb)
		n.peerLocked(r.id).enqueueLocked(pkt)
		return false, pkt == rb
	}
}

// forgetRoutesLocked drops the destinations known to be no node's and
// those whose peer is down.
func (n *Network) forgetRoutesLocked() {
	for a, r := range n.routes {
		if r.resolving {
			continue
		}
		if p := n.peers[r.id]; !r.none.IsZero() || p == nil || p.down {
			delete(n.routes, a)
		}
	}
}

// resolve looks dst up and sends the packets that waited for it; when
// the route was known (a refresh), it updates it.
func (n *Network) resolve(dst netip.Addr, r *route) {
	defer n.wg.Done()
	ctx, cancel := context.WithTimeout(n.ctx, resolveTimeout)
	id, err := n.cfg.Resolver.Resolve(ctx, dst)
	cancel()
	if err == nil && id == n.cfg.ID {
		err = fmt.Errorf("vip: %s is this node's own address in the directory", dst)
	}
	n.mu.Lock()
	if r.refreshing {
		r.refreshing, r.at = false, time.Now()
		switch {
		case err == nil:
			r.id = id
		case errors.Is(err, ErrNoNode):
			r.none = time.Now().Add(noRouteHold)
		} // other failures: the node known stays
		n.mu.Unlock()
		return
	}
	pending := r.pending
	r.pending, r.resolving = nil, false
	n.pending -= len(pending)
	if err != nil {
		r.none = time.Now().Add(noRouteHold)
		unreachable := errors.Is(err, ErrNoNode)
		if !unreachable {
			r.none = time.Now().Add(dialRetry)
			if n.quiet.Allow("lookup") {
				n.log.Warn("vip: looking up a destination", "dst", dst, "err", err)
			}
		}
		n.mu.Unlock()
		for _, pkt := range pending {
			n.drop(dropNoRoute, "")
			if unreachable {
				h, _ := Parse(pkt.pkt())
				n.writeICMP(icmpUnreachable(h, pkt.pkt()))
			}
			pkt.release()
		}
		return
	}
	r.id, r.at = id, time.Now()
	p := n.peerLocked(id)
	for _, pkt := range pending {
		p.enqueueLocked(pkt)
	}
	n.mu.Unlock()
}
