package vconn

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/gridlink/gridlink/identity"
)

// What each connection method knows of itself is in one place, a method
// entry (method_direct.go, method_reverse.go, method_splice.go,
// method_routed.go), as wireguard-go keeps one conn.Bind per transport:
// its rank, whether it can work toward a target, its head start in a
// race, how long its setup takes (the grace others get), whether it could
// plausibly work, the attempt itself, the causes of its failures and their
// words. The race (race.go), failure.go and explain.go ask the entries
// and know no method by name.

// method is one connection method's knowledge.
type method interface {
	// rank orders methods by directness: lower is more direct.
	rank() int
	// needsHub says whether the method goes through the hubs (this node's
	// session and the target's hub).
	needsHub() bool
	// possible says why the method cannot work toward target (a
	// *MethodError), or nil, beyond what every method needs (enabled; a
	// hub if needsHub).
	possible(n *Node, target identity.Machine) error
	// headStarts is the method's start in a race, in Config.HeadStart: a
	// handicap that lets more direct methods win if they work. It ends
	// early once every more direct method is settled (race.go).
	headStarts() int
	// setupTrips is how many half round trips of the path its setup
	// takes, plus its handshake: the race's grace for it (race.go).
	setupTrips() int
	// plausible reports whether the method could well work toward
	// target, judged by addresses and routes (r).
	plausible(n *Node, target identity.Machine, r reach) bool
	// attempt sets up one connection to port on target (a splice in up to
	// tries attempts); spared: a direct connection set up in advance
	// carried it.
	attempt(ctx context.Context, n *Node, target identity.Machine, port uint16, tries int) (c net.Conn, spared bool, err error)
	// cause is the end and measured cause of the method's failure err,
	// when no cause common to all methods applies (failure.go); ok false:
	// none known.
	cause(n *Node, err error) (end End, cause error, ok bool)
	// explain says in words why the method failed, when no words common
	// to all methods apply (explain.go); s is the error's text.
	explain(me *MethodError, f Facts, s string) (string, bool)
}

// methods is the table of methods by name.
var methods = map[Method]method{
	Direct:  directMethod{},
	Reverse: reverseMethod{},
	Splice:  spliceMethod{},
	Routed:  routedMethod{},
}

// allMethods are the methods in order of rank.
func allMethods() []Method {
	out := make([]Method, 0, len(methods))
	for m := range methods {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Method) int { return a.rank() - b.rank() })
	return out
}

// rank orders methods by directness: lower is more direct (an unknown
// method last).
func (m Method) rank() int {
	if mm := methods[m]; mm != nil {
		return mm.rank()
	}
	return len(methods)
}

// enabled reports whether method m is switched on.
func (n *Node) enabled(m Method) bool {
	return slices.Contains(n.cfg.Methods, m)
}

// possible says why a method cannot work toward target (a *MethodError),
// or nil.
func (n *Node) possible(m Method, target identity.Machine) error {
	mm := methods[m]
	switch {
	case !n.enabled(m):
		return methodErr(m, Local, ErrDisabled, fmt.Errorf("%s is disabled", m))
	case mm == nil:
		return methodErr(m, Local, ErrDisabled, fmt.Errorf("method %s is not available", m))
	case mm.needsHub() && n.session == nil:
		return methodErr(m, Local, ErrNoHub, fmt.Errorf("this node has no hub"))
	case mm.needsHub():
		if err := n.session.NotAttached(); err != nil {
			return methodErr(m, Local, ErrNoHub, err) // a *NotAttachedError: errors.As finds it
		}
		if target.Hub.IsZero() {
			return methodErr(m, Remote, ErrNoHub, fmt.Errorf("the target is not attached to a hub"))
		}
	}
	return mm.possible(n, target)
}

// startDelay is a method's head start handicap in a race (see
// method.headStarts).
func (n *Node) startDelay(m Method) time.Duration {
	return time.Duration(methods[m].headStarts()) * n.cfg.HeadStart
}

// attempt tries one method; a splice gets up to tries attempts.
func (n *Node) attempt(ctx context.Context, m Method, target identity.Machine, port uint16, tries int) result {
	start := time.Now()
	var c net.Conn
	var err error
	spared := false
	if mm := methods[m]; mm != nil {
		c, spared, err = mm.attempt(ctx, n, target, port, tries)
	} else {
		err = fmt.Errorf("method %s is not available", m)
	}
	err = n.classify(m, err)
	if !n.cfg.NoCounters {
		n.counts.setupDone(ctx, m, err)
	}
	return result{method: m, conn: c, err: err, elapsed: time.Since(start), target: target, spare: spared && err == nil}
}

// plausible reports whether a method could well work toward target, judged
// by addresses as the SmartSockets heuristic does (a private address on a
// network we are not on is a long shot) and by the ends' routes (an end
// without a default route reaches only its own networks): not worth
// waiting for once another method has connected, nor worth holding back a
// less direct method for.
func (n *Node) plausible(m Method, target identity.Machine) bool {
	mm := methods[m]
	if mm == nil {
		return false
	}
	local := n.localPrefixes()
	n.self.mu.Lock()
	nonRouted := n.self.nonRouted
	n.self.mu.Unlock()
	return mm.plausible(n, target, reach{nets: append(local, n.cfg.Preferred...), nonRouted: nonRouted})
}

// reach is what this host reaches: its networks (and the preferred ones),
// and whether it has a default route.
type reach struct {
	nets      []netip.Prefix
	nonRouted bool // this host has no default route
}

// reachable: some address is public, this host's, or on one of its
// networks.
func (r reach) reachable(addrs []netip.AddrPort) bool {
	for _, a := range addrs {
		ip := a.Addr().Unmap()
		if (!ip.IsPrivate() && ip.IsGlobalUnicast()) || ip.IsLoopback() {
			return true // public, or the same host
		}
		if slices.ContainsFunc(r.nets, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			return true
		}
	}
	return false
}

// near: some address is this host's or on one of its networks, where the
// two ends reach each other whatever their routes.
func (r reach) near(addrs []netip.AddrPort) bool {
	for _, a := range addrs {
		ip := a.Addr().Unmap()
		if ip.IsLoopback() || slices.ContainsFunc(r.nets, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			return true
		}
	}
	return false
}

func onlyPrivate(addrs []netip.AddrPort) []netip.AddrPort {
	var out []netip.AddrPort
	for _, a := range addrs {
		if a.Addr().Unmap().IsPrivate() {
			out = append(out, a)
		}
	}
	return out
}
