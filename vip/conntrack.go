package vip

import (
	"net/netip"
	"sync"
	"time"
)

// With access rules, what answers this node's own traffic passes them:
// the flows it opened (TCP and UDP, by protocol, far address and both
// ports) and the pings it sent (by the echo identifier), each for
// flowTTL after its last packet out. At most maxFlows are tracked; past
// that the expired ones are forgotten, then any.
const (
	flowTTL  = 5 * time.Minute
	maxFlows = 1 << 16
)

type flowKey struct {
	proto    uint8
	far      netip.Addr
	farPort  uint16 // the echo identifier for pings
	nearPort uint16
}

type conntrack struct {
	mu    sync.Mutex
	flows map[flowKey]time.Time // when it expires
}

// keys of a packet: sent (out) or received (in); ok false when the packet
// is no flow's (not TCP, UDP or an echo).
func flowOf(h Header, t transport, out bool) (flowKey, bool) {
	switch {
	case t.ports && out:
		return flowKey{proto: t.proto, far: h.Dst, farPort: t.dstPort, nearPort: t.srcPort}, true
	case t.ports:
		return flowKey{proto: t.proto, far: h.Src, farPort: t.srcPort, nearPort: t.dstPort}, true
	case t.isEcho() && out:
		return flowKey{proto: t.proto, far: h.Dst, farPort: t.echoID}, true
	case t.isEcho():
		return flowKey{proto: t.proto, far: h.Src, farPort: t.echoID}, true
	}
	return flowKey{}, false
}

// sent notes a packet this node sends.
func (c *conntrack) sent(h Header, t transport) {
	if t.icmp && !t.isEchoRequest() {
		return
	}
	k, ok := flowOf(h, t, true)
	if !ok {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flows == nil {
		c.flows = map[flowKey]time.Time{}
	}
	if _, known := c.flows[k]; !known && len(c.flows) >= maxFlows {
		for f, exp := range c.flows {
			if now.After(exp) {
				delete(c.flows, f)
			}
		}
		for f := range c.flows {
			if len(c.flows) < maxFlows {
				break
			}
			delete(c.flows, f)
		}
	}
	c.flows[k] = now.Add(flowTTL)
}

// answers reports whether a received packet belongs to a flow this node
// opened (an echo reply to its ping).
func (c *conntrack) answers(h Header, t transport) bool {
	if t.icmp && !t.isEchoReply() {
		return false
	}
	k, ok := flowOf(h, t, false)
	if !ok {
		return false
	}
	c.mu.Lock()
	exp, known := c.flows[k]
	c.mu.Unlock()
	return known && time.Now().Before(exp)
}
