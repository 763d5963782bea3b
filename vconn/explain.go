package vconn

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
)

// Try sets up one connection to port on target by method m alone, waits
// for the target's verdict on this node (which a connection's first read
// would otherwise learn: a target that does not admit this node lets the
// setup itself succeed), and closes it (uncommitted: the target's
// application never sees it). It is for diagnosis: `gridlink doctor` tries
// every method.
func (n *Node) Try(ctx context.Context, m Method, target identity.Machine, port uint16) (time.Duration, error) {
	if err := n.possible(m, target); err != nil {
		return 0, err
	}
	r := n.attempt(ctx, m, target, port, 1)
	if r.conn == nil {
		return r.elapsed, r.err
	}
	defer r.conn.Close()
	if v, ok := r.conn.(interface{ Verdict() error }); ok {
		if d, ok := ctx.Deadline(); ok {
			_ = r.conn.SetReadDeadline(d)
		}
		if err := v.Verdict(); err != nil {
			return r.elapsed, err
		}
	}
	return r.elapsed, nil
}

// Explain says in plain words why a method failed, for people who should
// not have to debug networks: the seed's complaint is that users must find
// the cause of connectivity problems themselves.
func Explain(m Method, err error) string {
	if err == nil {
		return "works"
	}
	s := err.Error()
	switch {
	case errors.Is(err, pki.ErrDenied):
		return "refused in the handshake, for a reason the refusing end names: " + s
	case errors.Is(err, ErrRefused):
		return "the target answered, but nothing listens on that port"
	case errors.Is(err, pki.ErrWrongPeer):
		return "an address of the target leads to another machine here (a private address that two sites both use); the identity check caught it"
	case strings.Contains(s, "is disabled"):
		return "this method is switched off in the configuration"
	case strings.Contains(s, "has no hub"), strings.Contains(s, "not attached to a hub"):
		return s + ": only direct connections are possible without hubs"
	case strings.Contains(s, "lists no addresses"):
		return "the target published no address to connect to"
	case strings.Contains(s, "no address to be called back at"):
		return "this host has no address the target could connect back to"
	case m == Splice && strings.Contains(s, "cannot be predicted"):
		return "this host's NAT picks its ports at random, so the port a splice would need cannot be predicted (" + s + ")"
	case m == Splice && strings.Contains(s, "failed") && strings.Contains(s, "ago"):
		return "splicing to that site failed recently; it is tried again later (" + s + ")"
	case m == Splice && strings.Contains(s, "says"):
		return "the target cannot take part in a splice: " + s
	case m == Splice && strings.Contains(s, "failed") && strings.Contains(s, "no connection"):
		return "both ends tried to connect to each other at once, but the SYNs did not get through: a NAT or firewall in between filters them, or mapped ports other than predicted (" + s + ")"
	case m == Reverse && strings.Contains(s, "cannot reach") && strings.Contains(s, "network is unreachable"):
		return "the target is on a non-routed network: it cannot connect out to this host"
	case m == Reverse && strings.Contains(s, "cannot reach"):
		return "the target cannot connect back to this host: as seen from there, this host is behind a firewall or NAT, or on a network it cannot route to (" + s + ")"
	case strings.Contains(s, "network is unreachable"), strings.Contains(s, "no route to host"):
		return "no route: one end is on a network that does not route beyond its site (non-routed), so only the hubs can carry this connection"
	case strings.Contains(s, "i/o timeout"), strings.Contains(s, "deadline exceeded"), strings.Contains(s, "timed out"), strings.Contains(s, "did not call back"):
		return "no answer: a firewall or NAT in between silently drops the connection, or the address is private to the target's site"
	case strings.Contains(s, "connection refused"):
		return "the target's host rejects connections there: a firewall that rejects, or nothing listening"
	case strings.Contains(s, "no route to hub"), strings.Contains(s, "unreachable"):
		return "the hubs have no route between the two sites: no hub links them, directly or through others"
	}
	return s
}
