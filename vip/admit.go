package vip

import (
	"encoding/binary"
	"errors"
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
// with ICMP administratively prohibited back over the tunnel. A fragment
// the rules could not judge (fragment.go) is dropped with or without
// rules.
func (n *Network) admit(p *peer, l *link, h Header, pkt []byte) bool {
	rules := n.rules.Load()
	if rules.IsZero() && !maybeFragment(h) {
		return true
	}
	t, err := transportOf(h, pkt)
	switch {
	case errors.Is(err, ErrBadFragment):
		p.c.malformed.Add(1)
		n.drop(dropBadFragment, "a fragment from a peer that the access rules could not judge", "peer", p.id.Short(), "src", h.Src, "dst", h.Dst, "err", err)
		return false
	case rules.IsZero():
		return true
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
		p.enqueueLocked(copyPacket(msg))
	}
	n.mu.Unlock()
}

// noteRefusal counts, and logs (rate-limited), an ICMP administratively
// prohibited the peer p sent this node: the peer's access rules refused
// one of this node's packets, named here in the same words as in the
// peer's log. The packet still goes to the device, for the program.
func (n *Network) noteRefusal(p *peer, h Header, pkt []byte) {
	if !isICMPProto(h.Version, h.Protocol) || len(pkt) < h.HeaderLen+icmpHeader {
		return
	}
	typ, code := pkt[h.HeaderLen], pkt[h.HeaderLen+1]
	if !(h.Version == 4 && typ == icmpv4DestUnreachable && code == icmpv4CodeProhibited ||
		h.Version == 6 && typ == icmpv6DestUnreachable && code == icmpv6CodeProhibited) {
		return
	}
	p.c.refused.Add(1)
	if !n.quiet.Allow("refused") {
		return
	}
	args := []any{"peer", p.id.Short()}
	if q, ok := quotedOf(h.Version, pkt[h.HeaderLen+icmpHeader:]); ok {
		args = append(args, "proto", q.name(), "dst", q.dst)
		if q.ports {
			args = append(args, "port", q.dstPort)
		}
	}
	n.log.Warn("vip: a packet refused by the peer: "+dropDenied.String(), args...)
}

// quoted is what an ICMP error says of the packet it quotes.
type quoted struct {
	transport
	dst netip.Addr
}

// quotedOf reads the packet an ICMP error quotes (its IP header and the
// start of what follows, cut short: not a whole packet for Parse) for
// its protocol, destination and destination port. IPv6 extension headers
// in the quote are not walked (the protocol is the first next header).
func quotedOf(version int, q []byte) (quoted, bool) {
	var out quoted
	off := 0
	switch {
	case version == 4 && len(q) >= ipv4MinHeader && q[0]>>4 == 4 && int(q[0]&0x0f)*4 >= ipv4MinHeader:
		off = int(q[0]&0x0f) * 4
		out.proto, out.dst = q[9], netip.AddrFrom4([4]byte(q[16:20]))
	case version == 6 && len(q) >= ipv6Header && q[0]>>4 == 6:
		off = ipv6Header
		out.proto, out.dst = q[6], netip.AddrFrom16([16]byte(q[24:40]))
	default:
		return out, false
	}
	if (out.proto == protoTCP || out.proto == protoUDP) && len(q) >= off+4 {
		out.ports = true
		out.srcPort, out.dstPort = binary.BigEndian.Uint16(q[off:]), binary.BigEndian.Uint16(q[off+2:])
	}
	return out, true
}
