package hub

import (
	"errors"
	"fmt"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/wire"
)

// A hub that refuses a link after reading its hello (the certificate's
// role does not allow what the hello asks, the name is not a name, is
// not the certificate's or is held by another identity, or another
// process with the identity is attached there and answers:
// wire/instance.go) sends a wire.KRefused message with the reason in
// place of its own hello, logs the same reason and closes the link. The
// refused end's error is a *RefusedError;
// retrying will not change it, so sessions and hub diallers stop.

// Refusals after the hello, on both ends (errors.Is).
var (
	// ErrPermanent is wrapped by every *RefusedError: a refusal that
	// trying again does not change.
	ErrPermanent = errors.New("refused for good")
	// ErrWrongRole: the certificate's role does not allow the link (a hub
	// certificate attaching as a node, a node's or user's linking as a
	// hub).
	ErrWrongRole = errors.New("wrong role for the certificate")
	// ErrNameTaken: another identity holds the name in the overlay.
	ErrNameTaken = errors.New("name held by another identity")
	// ErrLaneRefused: a hub refused a connection that asked to join a
	// trunk as one of its lanes (wire/lane.go); the trunk goes on with the
	// connections it has.
	ErrLaneRefused = errors.New("lane of a trunk refused")
	// ErrIdentityAttached: another process with this identity is attached
	// to the hub and answers (wire.RefusedAttached); the hub keeps one
	// attachment per identity.
	ErrIdentityAttached = errors.New("identity attached by another process")
)

// RefusedError is a hub's refusal of a link after its hello. On the
// refused end ByPeer is true and Hub names the refusing hub; on the
// refusing end it is what the hub logs. It wraps pki.ErrDenied,
// ErrPermanent and its kind (ErrWrongRole, pki.ErrNameNotCertified,
// ErrNameTaken, ErrLaneRefused or identity.ErrBadName).
type RefusedError struct {
	Hub    string // the refusing hub's name
	ByPeer bool
	Code   string // wire.Refused*
	Reason string
	// Holder is, for ErrNameTaken, the node that holds the name, for
	// ErrIdentityAttached the other process's attachment (its ID, name,
	// observed address, and Hub and HubName: where it is attached).
	Holder identity.Machine
}

func (e *RefusedError) Error() string {
	if e.ByPeer {
		return fmt.Sprintf("%v by hub %s: %s", pki.ErrDenied, e.Hub, identity.PrintableLine(e.Reason)) // the hub's words
	}
	return fmt.Sprintf("refused: %s", e.Reason)
}

func (e *RefusedError) Unwrap() []error {
	errs := []error{pki.ErrDenied, ErrPermanent}
	switch e.Code {
	case wire.RefusedRole:
		errs = append(errs, ErrWrongRole)
	case wire.RefusedName:
		errs = append(errs, pki.ErrNameNotCertified)
	case wire.RefusedNameTaken:
		errs = append(errs, ErrNameTaken)
	case wire.RefusedLane:
		errs = append(errs, ErrLaneRefused)
	case wire.RefusedBadName:
		errs = append(errs, identity.ErrBadName)
	case wire.RefusedAttached:
		errs = append(errs, ErrIdentityAttached)
	}
	return errs
}

// Message is the refusal as sent, in place of the refusing hub's hello.
func (e *RefusedError) Message() *wire.Message {
	r := &wire.Refusal{Code: e.Code, Reason: e.Reason}
	if !e.Holder.ID.IsZero() {
		h := e.Holder
		r.Holder = &h
	}
	return &wire.Message{Kind: wire.KRefused, Refusal: r}
}

// refusedBy is a refusal received from hub.
func refusedBy(hub string, r *wire.Refusal) *RefusedError {
	e := &RefusedError{Hub: hub, ByPeer: true, Code: r.Code, Reason: r.Reason}
	if r.Holder != nil {
		e.Holder = *r.Holder
	}
	return e
}
