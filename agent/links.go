package agent

import (
	"net"
	"slices"
	"sync"

	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/status"
)

// streamLinks are the links of the agent's connect streams while they
// run, for its status: the path each takes now and its live path
// upgrades (link.Options.Upgrade).
type streamLinks struct {
	mu   sync.Mutex
	byID map[uint64]streamLink
}

type streamLink struct {
	addr string
	c    *link.Conn
}

// add remembers stream id's overlay side up, if it is a link, until the
// returned function is called.
func (s *streamLinks) add(id uint64, addr string, up net.Conn) (remove func()) {
	c, ok := up.(*link.Conn)
	if !ok {
		return func() {}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[uint64]streamLink{}
	}
	s.byID[id] = streamLink{addr, c}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.byID, id)
	}
}

// status reports the links, the oldest stream first.
func (s *streamLinks) status() []status.StreamLink {
	s.mu.Lock()
	ids := make([]uint64, 0, len(s.byID))
	for id := range s.byID {
		ids = append(ids, id)
	}
	links := make([]streamLink, len(ids))
	slices.Sort(ids)
	for i, id := range ids {
		links[i] = s.byID[id]
	}
	s.mu.Unlock()
	out := make([]status.StreamLink, len(ids))
	for i, l := range links {
		sl := status.StreamLink{Stream: ids[i], Remote: l.addr, Method: string(l.c.Path()), Resumable: l.c.Resumable(), Upgrade: l.c.Upgrading()}
		for _, sw := range l.c.Stats().Switches {
			sl.Switches = append(sl.Switches, status.PathSwitch{From: string(sw.From), To: string(sw.To), At: sw.At})
		}
		out[i] = sl
	}
	return out
}
