package wire

import (
	"fmt"

	"github.com/gridlink/gridlink/identity"
)

// Messages that keep node names unique across the overlay, and the hub's
// refusal of a link after its hello.
//
// A hub that admits a node with a name first asks every hub it has a
// route to (routed KClaim) which identities hold that name; each answers
// with its holders (KClaimed). An answer, or a claim that reaches the
// hub of a holder, is judged by one rule both ends apply alike (package
// hub), so that of two nodes claiming a name at the same time one keeps
// it everywhere.
const (
	// KClaim asks a hub which of its nodes hold Claim.Name (routed, from
	// hub to hub): the sender is about to admit Claim.Node under it.
	KClaim = "claim"
	// KClaimed answers KClaim: the answering hub's holders of the name
	// (Claimed).
	KClaimed = "claimed"
	// KRefused is a hub's refusal of a link whose hello it read: sent in
	// place of its own hello (and on an attached node's link when another
	// node takes its name), after which the hub closes the link. It is
	// never routed.
	KRefused = "refused"
)

// Refusal codes (Refusal.Code): what kind of refusal it is, so the
// refused end can tell them apart without reading the words.
const (
	// RefusedRole: the certificate's role does not allow what the hello
	// asked (a hub certificate attaching as a node, a node's or user's
	// linking as a hub). It cannot change without another certificate.
	RefusedRole = "role"
	// RefusedName: the certificate does not certify the name of the hello.
	RefusedName = "name"
	// RefusedNameTaken: another identity holds the name (Holder says
	// which, and at which hub).
	RefusedNameTaken = "name-taken"
	// RefusedLane (lane.go): a connection that asked to join a trunk as
	// one of its lanes.

	// RefusedBadName: the hello's name is not a name (identity.CheckName:
	// a dot, a space, a control character, too long, ...). It cannot
	// change without another name. A node older than this code reads it
	// as a malformed message.
	RefusedBadName = "bad-name"
)

// maxHolders bounds the holders one KClaimed lists.
const maxHolders = 16

// Refusal is the body of KRefused.
type Refusal struct {
	Code   string            `json:"code"`             // one of the Refused* codes
	Reason string            `json:"reason"`           // in words, as the refusing hub logs it
	Holder *identity.Machine `json:"holder,omitempty"` // RefusedNameTaken, RefusedAttached: the node holding the name or identity, with its hub
}

// Claim is the body of KClaim.
type Claim struct {
	Query   uint64  `json:"query"`
	Name    string  `json:"name"`
	Holding Holding `json:"holding"` // the node about to be admitted
}

// Holding is one node's hold on a name, as the hub judging it sees it.
type Holding struct {
	Node identity.Machine `json:"node"` // with Hub and HubName
	// Owner is the identity behind the node: in a grid with a CA the
	// subject of its end-entity certificate (a user's for a proxy), else
	// the node's ID. Nodes of one owner may share a name.
	Owner string `json:"owner"`
	// Bound says the node's certificate certifies the name (a hub's or
	// node's certificate; see package pki).
	Bound bool `json:"bound,omitempty"`
	// Attached says the node is admitted; false while its hub waits for
	// the answers to its claim.
	Attached bool `json:"attached,omitempty"`
	// SinceMs is when its hub started admitting it (Unix milliseconds,
	// the hub's clock).
	SinceMs int64 `json:"since_ms"`
}

// Claimed is the body of KClaimed.
type Claimed struct {
	Query   uint64    `json:"query"`
	Holders []Holding `json:"holders,omitempty"`
}

func (r *Refusal) check() error {
	switch r.Code {
	case RefusedRole, RefusedName, RefusedNameTaken, RefusedLane, RefusedBadName, RefusedAttached:
	default:
		return fmt.Errorf("unknown refusal code %q", r.Code)
	}
	if r.Reason == "" || len(r.Reason) > 1024 {
		return fmt.Errorf("refusal reason of %d bytes, want 1 to 1024", len(r.Reason))
	}
	if r.Holder != nil {
		return checkMachine(r.Holder)
	}
	return nil
}

func (h *Holding) check() error {
	if len(h.Owner) == 0 || len(h.Owner) > 1024 {
		return fmt.Errorf("holding owner of %d bytes, want 1 to 1024", len(h.Owner))
	}
	return checkMachine(&h.Node)
}

func (c *Claim) check() error {
	if c.Name == "" || len(c.Name) > maxName {
		return fmt.Errorf("claim of a bad name")
	}
	return c.Holding.check()
}

func (c *Claimed) check() error {
	if len(c.Holders) > maxHolders {
		return fmt.Errorf("%d holders, more than %d", len(c.Holders), maxHolders)
	}
	for i := range c.Holders {
		if err := c.Holders[i].check(); err != nil {
			return err
		}
	}
	return nil
}
