package gridlink

import (
	"net/netip"
	"slices"
	"sync"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/status"
	"github.com/gridlink/gridlink/vconn"
	"github.com/gridlink/gridlink/vip"
)

// vipPeers is what the node knows of its virtual peers beyond vip's
// counters, for the status: their names and addresses (as the directory
// and their connections named them) and their open packet connections
// (whose methods are the paths).
type vipPeers struct {
	mu    sync.Mutex
	m     map[identity.ID]*vipPeer
	conns map[*vipConn]struct{}
}

type vipPeer struct {
	name  string
	addrs []netip.Addr
}

const maxPeerAddrs = 4 // addresses remembered per peer (an IPv4 and an IPv6 one, usually)

func newVIPPeers() *vipPeers {
	return &vipPeers{m: map[identity.ID]*vipPeer{}, conns: map[*vipConn]struct{}{}}
}

func (ps *vipPeers) peerLocked(id identity.ID) *vipPeer {
	p := ps.m[id]
	if p == nil {
		p = &vipPeer{}
		ps.m[id] = p
	}
	return p
}

// resolved records the directory's answer: a is m's.
func (ps *vipPeers) resolved(a netip.Addr, m identity.Machine) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.peerLocked(m.ID)
	if m.Name != "" {
		p.name = m.Name
	}
	if !slices.Contains(p.addrs, a) {
		p.addrs = append(p.addrs, a)
		if len(p.addrs) > maxPeerAddrs {
			p.addrs = p.addrs[1:]
		}
	}
}

// machine records a peer's name from its connection.
func (ps *vipPeers) machine(m identity.Machine) {
	if m.ID.IsZero() || m.Name == "" {
		return
	}
	ps.mu.Lock()
	ps.peerLocked(m.ID).name = m.Name
	ps.mu.Unlock()
}

// vipConn is a packet connection, tracked while open.
type vipConn struct {
	*vconn.Conn
	id   identity.ID
	ps   *vipPeers
	once sync.Once
}

// track returns c as a tracked connection of the peer id.
func (ps *vipPeers) track(id identity.ID, c *vconn.Conn) *vipConn {
	c.KeepTLS() // a packet connection never leaves TLS: its reads run ahead of the records
	vc := &vipConn{Conn: c, id: id, ps: ps}
	ps.mu.Lock()
	ps.conns[vc] = struct{}{}
	ps.mu.Unlock()
	return vc
}

func (c *vipConn) Close() error {
	c.once.Do(func() {
		c.ps.mu.Lock()
		delete(c.ps.conns, c)
		c.ps.mu.Unlock()
	})
	return c.Conn.Close()
}

// methodRank orders the paths, most direct first.
var methodRank = map[vconn.Method]int{vconn.Direct: 0, vconn.Reverse: 1, vconn.Splice: 2, vconn.Routed: 3}

// paths are the methods of id's open connections, most direct first.
func (ps *vipPeers) pathsLocked(id identity.ID) []string {
	var ms []vconn.Method
	for c := range ps.conns {
		if c.id == id {
			ms = append(ms, c.Method())
		}
	}
	slices.SortFunc(ms, func(a, b vconn.Method) int { return methodRank[a] - methodRank[b] })
	var out []string
	for _, m := range ms {
		out = append(out, string(m))
	}
	return out
}

// status is the virtual network's part of the agent's status.
func (v *vipNode) status() *status.VIP {
	st := &status.VIP{Device: v.devName, MTUBytes: v.net.MTU(), Peers: []status.VIPPeer{},
		Addrs: []string{netip.PrefixFrom(v.v4, v.cfg.Prefix4.Bits()).String(), netip.PrefixFrom(v.v6, v.cfg.Prefix6.Bits()).String()}}
	if s := v.node.Session(); s != nil {
		if _, _, err := s.VirtualAddrs(); err != nil {
			st.Claim = err.Error()
		}
	}
	stats := v.net.Stats()
	st.Drops = vipDrops(stats.Drops)
	if !v.cfg.Rules.IsZero() {
		st.Rules = v.cfg.Rules.String()
	}
	if v.names != nil {
		st.Names = &status.VIPNames{Zone: v.names.srv.Zone(), Server: v.names.srv.Addr().String(), Resolver: string(v.names.method())}
	}
	v.peers.mu.Lock()
	defer v.peers.mu.Unlock()
	for _, p := range stats.Peers {
		sp := peerStatus(p)
		if info := v.peers.m[p.ID]; info != nil {
			sp.Name = info.name
			for _, a := range info.addrs {
				sp.Addrs = append(sp.Addrs, a.String())
			}
		}
		sp.Paths = v.peers.pathsLocked(p.ID)
		if len(sp.Paths) > 0 {
			sp.Path = sp.Paths[0]
		}
		st.Peers = append(st.Peers, sp)
	}
	return st
}

func peerStatus(p vip.PeerStats) status.VIPPeer {
	return status.VIPPeer{ID: p.ID, Addrs: []string{}, Connected: p.Connected, QueuedPackets: p.Queued,
		SentPackets: p.SentPackets, SentBytes: p.SentBytes, RecvPackets: p.RecvPackets, RecvBytes: p.RecvBytes,
		QueueFullPackets: p.QueueFull, ConnLostPackets: p.ConnLost, SpoofedPackets: p.Spoofed,
		DeniedPackets: p.Denied, RefusedPackets: p.Refused, Switches: p.Switches, Redials: p.Redials}
}

func vipDrops(d vip.Drops) status.VIPDrops {
	return status.VIPDrops{MalformedPackets: d.Malformed, NotUnicastPackets: d.NotUnicast, SourceNotOursPackets: d.SourceNotOurs,
		TooBigPackets: d.TooBig, NoRoutePackets: d.NoRoute, QueueFullPackets: d.QueueFull, ConnLostPackets: d.ConnLost,
		NoConnectionPackets: d.NoConnection, SpoofedPackets: d.SpoofedSource, NotForUsPackets: d.NotForUs, DeviceWritePackets: d.DeviceWrite, DeniedPackets: d.Denied,
		BadFragmentPackets: d.BadFragment}
}

// vipCounters are what the packet path counted, for /metrics
// (metrics.Node.VirtualCounters): its peers' traffic summed, its drops.
func vipCounters(s vip.Stats) status.VIPCounters {
	c := status.VIPCounters{Drops: vipDrops(s.Drops)}
	for _, p := range s.Peers {
		c.SentPackets += p.SentPackets
		c.SentBytes += p.SentBytes
		c.RecvPackets += p.RecvPackets
		c.RecvBytes += p.RecvBytes
		if p.Connected {
			c.Connected++
		}
	}
	return c
}
