package hubserver

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// A node's machine identifier (its addresses) is what the hub returns for
// it in lookups: the one of its hello, replaced while attached by each
// wire.KMachine message on its trunk (hub.Session.SetMachine); after a
// wire.KMoved, none (the node is found at the hub it moved to).

// maxObserved bounds the observed addresses a hub keeps for a node.
const maxObserved = 8

// nodeRecord is what the hub keeps for a node that presents machine m on
// a link from remote: m with the hub fields filled and remote among the
// observed addresses; m's host-scoped addresses only if remote is on this
// hub's host (hostscope.go).
func (h *Hub) nodeRecord(m identity.Machine, remote netip.AddrPort) identity.Machine {
	if !onHost(remote) {
		m, _ = m.WithoutHostScoped()
	}
	m.Addrs = slices.Clone(m.Addrs)
	m.Observed = slices.Clone(m.Observed)
	m.Hub, m.HubName = h.id, h.cfg.Name
	m.Virtual = nil // the directory's to say (withVirtualLocked), not the node's
	if remote.IsValid() && !slices.Contains(m.Observed, remote) && len(m.Observed) < maxObserved {
		m.Observed = append(m.Observed, remote)
	}
	return m
}

// updateNode replaces an attached node's record with the machine it sent
// (wire.KMachine, already checked as a hello's is). A node may update its
// own record only, and keeps the ID and name of its hello: anything else
// is a protocol violation that closes its link.
func (h *Hub) updateNode(p *peer, m *identity.Machine) error {
	// p.machine is written only here and in newPeer, both on p's reading
	// goroutine; others read it under h.mu.
	if m.ID != p.id {
		return fmt.Errorf("machine message names node %s, but the link is %s's: a node may update its own record only", m.ID.Short(), p.id.Short())
	}
	if m.Name != p.machine.Name {
		return fmt.Errorf("machine message renames node %s to %q: a node keeps the name of its hello", p.name, m.Name)
	}
	rec := h.nodeRecord(*m, p.t.Remote())
	h.mu.Lock()
	p.machine = rec
	h.mu.Unlock()
	h.logf("hub %s: node %s now lists addresses %v", h.cfg.Name, p.name, rec.Addrs)
	return nil
}

// nodeMoved takes node p's word that it moved to hub mv.To
// (wire.KMoved): lookups here no longer find it, so they find it there;
// its link stays while its circuits carry on.
func (h *Hub) nodeMoved(p *peer, mv *wire.Moved) {
	h.mu.Lock()
	p.movedTo = mv.To
	h.mu.Unlock()
	h.logf("hub %s: node %s moved to hub %s: lookups here no longer find it; its link stays while its circuits carry on", h.cfg.Name, p.name, h.hubName(mv.To))
}
