package hub

import (
	"fmt"
	"slices"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// A node's machine identifier (its addresses) is what the hub returns for
// it in lookups. The node gives it in its hello and may replace it while
// attached with a wire.KMachine message on its link, e.g. when a port
// mapping gives it one more address (Session.SetMachine); the session sends
// the latest one in the hello of every re-attachment.

// SetMachine replaces the machine identifier this node gives its hub (see
// SessionConfig.Machine), e.g. with an address a port mapping added: the
// hub's lookups return it once the hub has read it, and every later
// attachment's hello carries it. The ID and name must stay the same (zero
// ID: the session's); the hub fields are ignored. It does not wait for the
// hub: the update goes on the current link at once if there is one, else
// with the next attachment.
func (s *Session) SetMachine(m identity.Machine) error {
	me := s.cfg.Machine
	if m.ID.IsZero() {
		m.ID = me.ID
	}
	switch {
	case m.ID != me.ID:
		return fmt.Errorf("hub: set machine: ID %s is not this node's (%s)", m.ID.Short(), me.ID.Short())
	case m.Name != me.Name:
		return fmt.Errorf("hub: set machine: name %q is not this node's (%q): a node keeps its name while attached", m.Name, me.Name)
	}
	m.Hub, m.HubName = identity.ID{}, ""
	m.Addrs, m.Observed = slices.Clone(m.Addrs), slices.Clone(m.Observed)
	b := wire.Encode(&wire.Message{Kind: wire.KMachine, Machine: &m})
	// the hub would close our link over a message it rejects: check here.
	if len(b) > wire.MaxControl {
		return fmt.Errorf("hub: set machine: message of %d bytes, more than %d", len(b), wire.MaxControl)
	}
	if _, err := wire.Decode(b); err != nil {
		return fmt.Errorf("hub: set machine: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.machine = m
	// sent under s.mu, so that updates leave in order and install sees
	// whether the new link's hello had this one.
	if sl := s.cur; sl != nil && sl.t.Send(wire.TControl, 0, 0, b) {
		sl.sent = m
	}
	return nil
}

// catchUpLocked sends a newly installed link the machine set while its
// hello was on the way, if that hello carried an older one; s.mu is held.
func (s *Session) catchUpLocked(sl *slink) {
	if machineEqual(sl.sent, s.machine) {
		return
	}
	m := s.machine
	if sl.t.SendControl(&wire.Message{Kind: wire.KMachine, Machine: &m}) {
		sl.sent = m
	}
}

// self is the machine identifier the hub is told.
func (s *Session) self() identity.Machine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.machine
}

func machineEqual(a, b identity.Machine) bool {
	return a.ID == b.ID && a.Name == b.Name && a.Hub == b.Hub && a.HubName == b.HubName &&
		slices.Equal(a.Addrs, b.Addrs) && slices.Equal(a.Observed, b.Observed) && a.NAT == b.NAT && a.NonRouted == b.NonRouted && a.NATSequential == b.NATSequential
}
