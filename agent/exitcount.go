package agent

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/status"
	"github.com/gridlink/gridlink/vconn"
)

// What the exit service knows of its members, and what it counts.

// member is the grid member an exit is for, as its link's handshake
// proved it.
type member struct {
	key  string // its identity: its certificate's subject (a proxy's user's), or its ID in an open grid
	who  string // how it proved it
	node string // the node it came from
}

func (m member) String() string {
	return fmt.Sprintf("%q (%s) from node %s", m.key, m.who, m.node)
}

// memberOf is who is at the far end of c.
func memberOf(c net.Conn) member {
	var m member
	if lc, ok := c.(*link.Conn); ok {
		p := lc.First().Proof()
		m.key, m.who = p.Owner(), p.String()
	}
	m.node = c.RemoteAddr().String()
	if va, ok := c.RemoteAddr().(vconn.Addr); ok {
		if m.node = va.Node.Name; m.node == "" {
			m.node = va.Node.ID.Short()
		}
	}
	return m
}

// exitSlots counts each member's open exits.
type exitSlots struct {
	max  int // Config.ExitPerMember
	mu   sync.Mutex
	open map[string]int
}

// take counts one more exit of key, unless it has max open already.
func (s *exitSlots) take(key string, max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[key] >= max {
		return false
	}
	if s.open == nil {
		s.open = map[string]int{}
	}
	s.open[key]++
	return true
}

// give counts one exit of key less.
func (s *exitSlots) give(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[key]--; s.open[key] <= 0 {
		delete(s.open, key)
	}
}

// exitCounters are the exit service's counts (status.ExitCounters).
type exitCounters struct {
	opened, failed, sent, received atomic.Uint64
	refusals                       []atomic.Uint64 // by status.ExitRefusalReasons
}

func (c *exitCounters) refused(reason string) {
	if i := slices.Index(status.ExitRefusalReasons, reason); i >= 0 {
		c.refusals[i].Add(1)
	}
}

// ExitCounters is what the agent's exit service counted; zero without
// Config.AllowExit.
func (a *Agent) ExitCounters() status.ExitCounters {
	var out status.ExitCounters
	var c *exitCounters
	if a.exits != nil {
		c = &a.exits.count
		out = status.ExitCounters{Opened: c.opened.Load(), Failed: c.failed.Load(), SentBytes: c.sent.Load(), ReceivedBytes: c.received.Load()}
	}
	for i, r := range status.ExitRefusalReasons {
		n := uint64(0)
		if c != nil {
			n = c.refusals[i].Load()
		}
		out.Refused = append(out.Refused, status.ExitRefusal{Reason: r, Count: n})
	}
	return out
}
