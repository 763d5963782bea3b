package hub

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gridlink/gridlink/wire"
)

// observeTimeout bounds an observation request.
const observeTimeout = 5 * time.Second

// sniff tells an observation request (wire.ObserveRequest) from a TLS
// handshake on an accepted connection. It answers an observation itself
// and returns nil; otherwise it returns a connection that replays what it
// read.
func (h *Hub) sniff(c net.Conn) net.Conn {
	_ = c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		c.Close()
		return nil
	}
	_ = c.SetReadDeadline(time.Time{})
	if first[0] != wire.ObserveRequest[0] {
		return &replayConn{Conn: c, pending: first[:]}
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(observeTimeout))
	rest := make([]byte, len(wire.ObserveRequest)-1)
	if _, err := io.ReadFull(c, rest); err != nil || string(first[:])+string(rest) != wire.ObserveRequest {
		h.logf("hub %s: connection from %s: neither a TLS handshake nor an observation request", h.cfg.Name, c.RemoteAddr())
		return nil
	}
	_, _ = c.Write(wire.AppendObserved(nil, addrPort(c.RemoteAddr())))
	return nil
}

// replayConn returns pending before reading on.
type replayConn struct {
	net.Conn
	pending []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
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
	p.l.sendControl(&wire.Message{Kind: wire.KHubList, HubList: list})
}

// Hubs asks the hub for the hubs it knows, itself first.
func (s *Session) Hubs(ctx context.Context) ([]wire.RouteAd, error) {
	sl, err := s.current(ctx)
	if err != nil {
		return nil, err
	}
	ch := make(chan []wire.RouteAd, 1)
	s.mu.Lock()
	s.nextQ++
	q := s.nextQ
	s.hubQueries[q] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.hubQueries, q)
		s.mu.Unlock()
	}()
	sl.l.sendControl(&wire.Message{Kind: wire.KHubs, Hubs: &wire.HubsQuery{Query: q}})
	select {
	case hubs := <-ch:
		return hubs, nil
	case <-sl.l.done:
		return nil, fmt.Errorf("hub: hub list: hub link to %s lost", sl.hub.Name)
	case <-s.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, fmt.Errorf("hub: hub list: %w", ctx.Err())
	}
}
