package pki

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gridlink/gridlink/pki/ca"
)

// Node and hub names. In a grid with a CA, a hub's or node's certificate
// binds its name: the holder may go by the certificate's CN or one of its
// aliases (DNS names in the subject alternative name, `gridlink cert issue
// --alias`), by no other name. A user's node (the user's certificate or a
// proxy of it, e.g. `gridlink node --proxy`, `gridlink cp`, a transfer's
// transient push node) may go by any name, but its hold is unbound: hubs
// give the name to a hub or node whose certificate certifies it (package
// hub keeps names unique across the overlay). In an open grid nothing
// binds a name; hubs give it to its first holder.
//
// Names are held by identities (Owner), not keys: nodes of one identity
// may share a name (a node certificate reissued for a new key, a user's
// nodes), nodes of two never do.

// ErrNameNotCertified is wrapped by MayUse's refusal (*NameError).
var ErrNameNotCertified = errors.New("name not certified")

// NameError says that a peer's certificate does not certify a name.
type NameError struct {
	Peer      string   // the peer (Peer.String)
	Name      string   // the name it asked for
	Certified []string // the names its certificate certifies
}

func (e *NameError) Error() string {
	return fmt.Sprintf("%s asked for the name %q, but its certificate certifies %s only", e.Peer, e.Name, strings.Join(quoteAll(e.Certified), ", "))
}

func (e *NameError) Unwrap() error { return ErrNameNotCertified }

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// Owner names the identity behind the peer, the holder of its names: in
// a grid with a CA its end-entity certificate's subject (the user's for a
// proxy chain), else its ID.
func (p Peer) Owner() string {
	if p.Chain == nil {
		return p.ID.String()
	}
	return p.Chain.Subject()
}

// Names lists the names the peer's certificate certifies: a hub's or
// node's CN and aliases; none for a user or in an open grid.
func (p Peer) Names() []string {
	if p.Chain == nil || p.Chain.Role == ca.User {
		return nil
	}
	return append([]string{p.Chain.Name}, p.Chain.Aliases...)
}

// Binds reports whether the peer's certificate certifies name.
func (p Peer) Binds(name string) bool { return slices.Contains(p.Names(), name) }

// MayUse says whether the peer may go by name (as a node or hub): a
// hub's or node's certificate must certify it; users and open grids go
// by any name. An empty name names nothing and is always allowed.
func (p Peer) MayUse(name string) error {
	if name == "" || p.Chain == nil || p.Chain.Role == ca.User || p.Binds(name) {
		return nil
	}
	return &NameError{Peer: p.String(), Name: name, Certified: p.Names()}
}

// Self is who these credentials prove to their own trust: their Peer as
// another end would see it (Chain nil in an open grid).
func (c *Credentials) Self() (Peer, error) {
	return c.Check(c.Chain())
}

// DefaultName is the name a hub or node of these credentials goes by
// unless told otherwise: its certificate's CN if it is a hub's or node's,
// else fallback.
func (c *Credentials) DefaultName(fallback string) string {
	if p, err := c.Self(); err == nil && len(p.Names()) > 0 {
		return p.Names()[0]
	}
	return fallback
}
