package hubserver

import (
	"errors"
	"io"
	"net"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/wire"
)

// observeTimeout bounds an observation request.
const observeTimeout = 5 * time.Second

// sniff tells an observation request (wire.ObserveRequest) from a TLS
// handshake on an accepted connection, reading the whole first message
// (the request, or the ClientHello's record) within
// direct.FirstBytesTimeout. It answers an observation itself and returns
// nil; otherwise it tells pend the peer has spoken and returns a
// connection that replays what it read.
func (h *Hub) sniff(c net.Conn, pend *direct.Pending) net.Conn {
	_ = c.SetReadDeadline(time.Now().Add(direct.FirstBytesTimeout))
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		h.silent(c, pend, err)
		return nil
	}
	if first[0] != wire.ObserveRequest[0] {
		hello, err := direct.ReadFirstRecord(c, first[:])
		if err != nil && !errors.Is(err, direct.ErrNotTLS) {
			h.silent(c, pend, err)
			return nil
		}
		if err != nil {
			hello = first[:] // not TLS: let the handshake say so
		}
		_ = c.SetReadDeadline(time.Time{})
		pend.Hello()
		return &direct.ReplayConn{Conn: c, Pending: hello}
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(observeTimeout))
	rest := make([]byte, len(wire.ObserveRequest)-1)
	if _, err := io.ReadFull(c, rest); err != nil || string(first[:])+string(rest) != wire.ObserveRequest {
		h.logQuiet(quietFailed, "hub %s: connection from %s: neither a TLS handshake nor an observation request", h.cfg.Name, c.RemoteAddr())
		return nil
	}
	_, _ = c.Write(wire.AppendObserved(nil, hub.AddrPort(c.RemoteAddr())))
	return nil
}

// silent closes a connection whose first message did not come in time.
func (h *Hub) silent(c net.Conn, pend *direct.Pending, err error) {
	c.Close()
	if pend.Err() != nil {
		return // shed, and logged so
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		h.logQuiet(quietSilent, "hub %s: connection from %s: no TLS ClientHello or observation request within %v", h.cfg.Name, c.RemoteAddr(), direct.FirstBytesTimeout)
		return
	}
	h.logQuiet(quietSilent, "hub %s: connection from %s: closed before a whole TLS ClientHello or observation request: %v", h.cfg.Name, c.RemoteAddr(), err)
}

// answerHubs answers a node's KHubs: every hub this one has a route to,
// itself first, with the addresses it listens at.
func (h *Hub) answerHubs(p *peer, q *wire.HubsQuery) {
	list := &wire.HubList{Query: q.Query, Hubs: []wire.RouteAd{{Hub: h.id, Name: h.cfg.Name, State: 0, Hops: 0, Addrs: h.addrs}}}
	for _, r := range h.Routes() {
		if r.Reachable() && r.Hub != h.id {
			list.Hubs = append(list.Hubs, wire.RouteAd{Hub: r.Hub, Name: r.Name, State: r.State, Hops: r.Hops, LatencyUs: r.Latency.Microseconds(), Addrs: r.Addrs, Nodes: r.Nodes})
		}
		if len(list.Hubs) == 64 {
			break
		}
	}
	p.t.SendControl(&wire.Message{Kind: wire.KHubList, HubList: list})
}
