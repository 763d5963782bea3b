package vip

import (
	"net/netip"

	"golang.org/x/time/rate"
)

// The ICMP errors this node sends back to a peer over the tunnel (access
// denied, too big for this node's device) are at most icmpBackBurst at
// once and icmpBackRate a second, per peer (RFC 4443 2.4 f): a peer
// sending thousands of refused packets gets a few answers, not
// thousands, and takes no answers from the others.
const (
	icmpBackRate  = 100
	icmpBackBurst = 50
)

func newICMPLimiter() *rate.Limiter { return rate.NewLimiter(icmpBackRate, icmpBackBurst) }

// admit applies this node's access rules to a packet the peer p sent on
// l (parsed as h): a denied one is dropped, counted, logged and answered
// with ICMP administratively prohibited back over the tunnel.
func (n *Network) admit(p *peer, l *link, h Header, pkt []byte) bool {
	rules := n.rules.Load()
	if rules.IsZero() {
		return true
	}
	t, err := transportOf(h, pkt)
	switch {
	case err != nil:
		p.c.malformed.Add(1)
		n.drop(dropMalformed, "a malformed packet from a peer", "peer", p.id.Short(), "err", err)
		return false
	case t.isICMPError() && n.aboutOurs(h, t, pkt):
		return true
	case n.flows.answers(h, t):
		return true
	case rules.allows(p.id, l.proof, t):
		return true
	}
	p.c.denied.Add(1)
	args := []any{"peer", p.id.Short(), "who", l.proof.String(), "proto", t.name(), "src", h.Src, "dst", h.Dst}
	if t.ports {
		args = append(args, "port", t.dstPort)
	} else if t.icmp {
		args = append(args, "icmp_type", t.icmpType)
	}
	n.drop(dropDenied, "a packet this node's access rules deny", args...)
	n.sendBack(p, icmpProhibited(h, pkt))
	return false
}

// aboutOurs reports whether the ICMP error pkt (transport t) is about a
// packet this node sent to the error's sender: the packet it quotes goes
// from one of this node's addresses to h.Src. A peer cannot use errors
// to reach past the rules, or to disturb this node's flows with others.
func (n *Network) aboutOurs(h Header, t transport, pkt []byte) bool {
	q := pkt[min(len(pkt), t.off+icmpHeader):]
	var src, dst netip.Addr
	switch {
	case h.Version == 4 && len(q) >= ipv4MinHeader && q[0]>>4 == 4:
		src, dst = netip.AddrFrom4([4]byte(q[12:16])), netip.AddrFrom4([4]byte(q[16:20]))
	case h.Version == 6 && len(q) >= ipv6Header && q[0]>>4 == 6:
		src, dst = netip.AddrFrom16([16]byte(q[8:24])), netip.AddrFrom16([16]byte(q[24:40]))
	default:
		return false
	}
	return dst == h.Src && n.ours(src)
}

// sendBack sends the ICMP error msg (nil: none due) to the peer p over
// the tunnel, within the rate of icmpBackRate.
func (n *Network) sendBack(p *peer, msg []byte) {
	if msg == nil || !p.c.icmpBack.Allow() {
		return
	}
	n.mu.Lock()
	if !p.down {
		p.enqueueLocked(msg)
	}
	n.mu.Unlock()
}
