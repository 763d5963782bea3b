// Package peercred tells which local account is at the other end of a
// connection accepted here, from the kernel: a unix socket's peer by
// SO_PEERCRED, a TCP connection's by the kernel's socket table (sock_diag
// over netlink, as `ss -e` reads it: the other end's socket, its ends
// swapped, and the uid that owns it). Listeners that act with their
// user's credentials (an agent's control socket, gridlink socks and
// forward, the dashboard) serve only that user (and root) by it, and
// refuse anyone else naming both uids (RefusedError).
//
// It needs nothing of the module: it sits in the lowest layer, below the
// agent's client, so that socks and forward use it without the overlay.
// Only Linux tells; elsewhere every lookup fails with ErrUnsupported and
// Admit refuses (fails closed).
package peercred

import (
	"errors"
	"fmt"
	"net"
	"os"
)

// ErrUnsupported: this system does not tell whose a connection is.
var ErrUnsupported = errors.New("peercred: this system does not tell which account is at the other end of a connection (only Linux does)")

// ErrNotLocal is wrapped by a NotLocalError.
var ErrNotLocal = errors.New("not a connection from this host")

// NotLocalError says that no socket of this host (of its network
// namespace) is the other end of a TCP connection: a client on another
// host, or one that has closed its end already.
type NotLocalError struct {
	Remote string // the connection's remote address
}

func (e *NotLocalError) Error() string {
	return fmt.Sprintf("no socket of this host is the other end of the connection from %s: it is not from this host, or its end is closed", e.Remote)
}

func (e *NotLocalError) Unwrap() error { return ErrNotLocal }

// ErrUnknown is wrapped by an UnknownError.
var ErrUnknown = errors.New("the caller's uid is unknown")

// UnknownError is a caller Admit refuses because the kernel did not say
// whose it is; Err says why.
type UnknownError struct {
	What   string // the refusing listener ("socks", "forward")
	Remote string // the caller's address
	Err    error
}

func (e *UnknownError) Error() string {
	return fmt.Sprintf("%s of uid %d refuses %s: %v: %v", e.What, os.Geteuid(), e.Remote, ErrUnknown, e.Err)
}

func (e *UnknownError) Unwrap() []error { return []error{ErrUnknown, e.Err} }

// RefusedError is a connection refused for its caller's uid: the
// listener What, run as OwnerUID, serves only OwnerUID and root. Its text
// is the refusal both ends name:
//
//	WHAT of uid N refuses uid M
type RefusedError struct {
	What      string // "agent", "hub", "socks", "forward"
	OwnerUID  int    // the uid the listener runs as
	CallerUID int    // the uid of the refused caller
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s of uid %d refuses uid %d", e.What, e.OwnerUID, e.CallerUID)
}

// Admit says whether the other end of c, a connection accepted by the
// listener what, may act as this process's user: nil for a socket of this
// process's (effective) uid or of root; a *RefusedError for any other
// uid; an *UnknownError when the kernel does not tell (wrapping a
// NotLocalError for a client on another host, ErrUnsupported off Linux).
func Admit(what string, c net.Conn) error {
	uid, err := UID(c)
	if err != nil {
		return &UnknownError{What: what, Remote: c.RemoteAddr().String(), Err: err}
	}
	return serves(what, os.Geteuid(), uid)
}

// serves is Admit's rule: a listener run as owner serves owner and root.
func serves(what string, owner, caller int) error {
	if caller != owner && caller != 0 {
		return &RefusedError{What: what, OwnerUID: owner, CallerUID: caller}
	}
	return nil
}
