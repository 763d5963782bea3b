package vconn

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
)

// nameTTL is how long a looked-up machine identifier is reused.
const nameTTL = time.Minute

// Resolve finds the machine a virtual address names, through the hubs.
func (n *Node) Resolve(ctx context.Context, a identity.Addr) (identity.Machine, error) {
	m, _, err := n.resolve(ctx, a)
	return m, err
}

// resolve is Resolve, and says whether the answer came from the name cache.
func (n *Node) resolve(ctx context.Context, a identity.Addr) (identity.Machine, bool, error) {
	if a.Node == n.cfg.Name || a.Node == n.ID().String() {
		return n.Machine(), false, nil
	}
	key := a.Node + "@" + a.Hub
	n.memo.mu.Lock()
	e, ok := n.memo.names[key]
	n.memo.mu.Unlock()
	if ok && time.Since(e.at) < nameTTL {
		return e.m, true, nil
	}
	m, err := n.lookup(ctx, a)
	return m, false, err
}

// lookup asks the hubs which machine a names.
func (n *Node) lookup(ctx context.Context, a identity.Addr) (identity.Machine, error) {
	key := a.Node + "@" + a.Hub
	if n.session == nil {
		return identity.Machine{}, fmt.Errorf("cannot resolve %q: this node has no hub", a.Node)
	}
	ms, err := n.session.Lookup(ctx, a.Node)
	if err != nil {
		return identity.Machine{}, fmt.Errorf("look up %q: %w", a.Node, err)
	}
	var match []identity.Machine
	for _, m := range ms {
		if a.Hub == "" || a.Hub == m.HubName || a.Hub == m.Hub.String() {
			match = append(match, m)
		}
	}
	switch len(match) {
	case 0:
		return identity.Machine{}, fmt.Errorf("no node %q is attached to any hub: %w", a, hub.ErrNotFound)
	case 1:
	default:
		var names []string
		for _, m := range match {
			names = append(names, m.ID.Short()+"@"+m.HubName)
		}
		return identity.Machine{}, fmt.Errorf("%q names %d nodes (%s): add @HUB or use an ID", a.Node, len(match), strings.Join(names, ", "))
	}
	n.memo.mu.Lock()
	n.memo.names[key] = nameEntry{match[0], time.Now()}
	n.memo.mu.Unlock()
	return match[0], nil
}

func (n *Node) forgetName(a identity.Addr) {
	n.memo.mu.Lock()
	delete(n.memo.names, a.Node+"@"+a.Hub)
	n.memo.mu.Unlock()
}
