package wire

import (
	"fmt"

	"github.com/gridlink/gridlink/identity"
)

// A node that moves from one hub to another (back to a preferred hub,
// package hub's home.go) keeps its link to the hub it left while
// circuits on it carry on, up to a minute. Meanwhile that hub would still
// answer lookups of the node, and the first answer ends a lookup: a
// connection set up then would go through the hub the node left, and be
// reset when that link closes. So the node tells the hub it left.

const (
	// KMoved is a node telling a hub, on their link, that it has moved
	// to another hub (Moved.To): the hub answers no more lookups of the
	// node (by name, ID or virtual address), so that they find it at its
	// new hub; the circuits and routed messages already on the link are
	// untouched. Sent only to hubs of VersionMoved or later (an earlier
	// one would take the unknown kind for a broken link). Never routed.
	KMoved = "moved"

	// VersionMoved is the first protocol version (Hello.Version) whose
	// hubs take KMoved.
	VersionMoved = 6
)

// Moved is the body of KMoved.
type Moved struct {
	// To is the hub the node moved to.
	To identity.ID `json:"to"`
}

func (m *Moved) check() error {
	if m.To.IsZero() {
		return fmt.Errorf("moved message names no hub")
	}
	return nil
}
