package vconn

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/nat"
	"github.com/gridlink/gridlink/pki"
)

// Try sets up one connection to port on target by method m alone, waits
// for the target's verdict on this node (which a connection's first read
// would otherwise learn: a target that does not admit this node lets the
// setup itself succeed), and closes it (uncommitted: the target's
// application never sees it). It is for diagnosis: `gridlink doctor` tries
// every method.
func (n *Node) Try(ctx context.Context, m Method, target identity.Machine, port uint16) (time.Duration, error) {
	target = n.unhidden(target)
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

// Facts is what is known of both ends of a connection besides a method's
// error, for Explain: their machine identifiers (addresses, and the
// addresses hubs observed them at) and this host's NAT classification and
// routing.
type Facts struct {
	Local, Target identity.Machine
	LocalNAT      nat.Class // this host's NAT as last classified
	LocalNATAt    time.Time // when; zero: never
	LocalNATErr   error     // why it could not be classified
	LocalRouted   bool      // this host has a default route
	LocalNets     []netip.Prefix
}

// Facts gathers what Explain needs about this host and target.
func (n *Node) Facts(target identity.Machine) Facts {
	f := Facts{Local: n.Machine(), Target: target, LocalRouted: HasDefaultRoute()}
	if n.session != nil {
		f.Local.Observed = n.session.Machine().Observed
	}
	f.LocalNAT, f.LocalNATAt, f.LocalNATErr = n.NAT()
	f.LocalNets = n.localPrefixes()
	return f
}

// HasDefaultRoute reads the kernel's IPv4 routing table: whether this host
// routes beyond its own networks. It says true when it cannot tell.
func HasDefaultRoute() bool {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return true
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 2 && fields[1] == "00000000" && fields[2] != "Destination" {
			return true
		}
	}
	return false
}

// natted returns the external address of a NAT m is behind, as m's own
// NAT classification found it (Machine.NAT) or else as a hub observed m
// at an address it does not have (not loopback: a hub reached through an
// ssh tunnel sees that).
func natted(m identity.Machine) (netip.Addr, bool) {
	has := func(ip netip.Addr) bool {
		return slices.ContainsFunc(m.Addrs, func(a netip.AddrPort) bool { return a.Addr().Unmap() == ip })
	}
	if ip := m.NAT.Unmap(); ip.IsValid() && !has(ip) {
		return ip, true
	}
	for _, o := range m.Observed {
		if ip := o.Addr().Unmap(); ip.IsValid() && !ip.IsLoopback() && !has(ip) {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// privateOnly returns m's addresses if all are private and none is on one
// of nets.
func privateOnly(m identity.Machine, nets []netip.Prefix) ([]string, bool) {
	var out []string
	for _, a := range m.Addrs {
		ip := a.Addr().Unmap()
		if !ip.IsPrivate() || slices.ContainsFunc(nets, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			return nil, false
		}
		out = append(out, ip.String())
	}
	return out, len(out) > 0
}

// measured says in words what a connect cause is, as measured.
func measured(cause error) string {
	switch cause {
	case ErrTimeout:
		return "connections got no answer"
	case ErrUnreachable:
		return "a router answered that they are unreachable"
	case ErrRejected:
		return "connections were reset"
	}
	return "connections failed"
}

// Explain says in plain words why method m failed, for people who should
// not have to debug networks (the seed's complaint is that users must find
// the cause of connectivity problems themselves). The words come from the
// facts: the end and the measured cause a *MethodError carries, and f;
// first those any method can meet, then the method's own (method.explain).
func Explain(m Method, err error, f Facts) string {
	if err == nil {
		return "works"
	}
	s := err.Error()
	var me *MethodError
	if !errors.As(err, &me) {
		me = &MethodError{Method: m, Err: err}
	}
	end, cause := me.End, me.Cause
	switch {
	case errors.Is(err, pki.ErrDenied):
		return "refused in the handshake, for a reason the refusing end names: " + s
	case errors.Is(err, direct.ErrRefused):
		return "the target answered, but nothing listens on that port"
	case errors.Is(err, pki.ErrWrongPeer):
		return "an address of the target leads to another machine here (a private address that two sites both use); the identity check caught it"
	case cause == ErrDisabled && end == Remote:
		return "the target has this method switched off in its configuration"
	case cause == ErrDisabled:
		return "this method is switched off in this host's configuration"
	case cause == ErrNoHub && end == Remote:
		return "the target is not attached to a hub: only direct connections reach it"
	case cause == ErrNoHub:
		return "this host is not attached to a hub: only direct connections are possible"
	case cause == ErrNoAddress && end == Remote:
		return "the target published no address to connect to"
	case cause == ErrNoAddress:
		return "this host has no address the target could connect back to"
	case cause == ErrNoHubRoute:
		return "the hubs have no route between the two sites: no hub links them, directly or through others (" + s + ")"
	case cause == ErrNotAttached:
		return "the target is no longer attached to the hub it was found at: it restarted or moved (" + s + ")"
	case cause == ErrRandomNAT && end == Remote:
		return "the target's NAT picks its ports at random, so the port a splice would need cannot be predicted"
	case cause == ErrRandomNAT:
		return fmt.Sprintf("this host's NAT (%s) picks its ports at random, so the port a splice would need cannot be predicted", f.LocalNAT)
	case cause == ErrNATUnknown && end == Remote:
		return "the target's NAT could not be classified (no hub outside it could observe its connections), so its next port cannot be predicted"
	case cause == ErrNATUnknown:
		why := "no hub outside it could observe this host's connections"
		if f.LocalNATErr != nil {
			why = f.LocalNATErr.Error()
		}
		return "this host's NAT could not be classified, so its next port cannot be predicted: " + why
	case cause == ErrSpliceRecent:
		return "splicing to that site failed recently; it is tried again later (" + s + ")"
	case cause == ErrPunch:
		return "both ends tried to connect to each other at once, but the SYNs did not get through: a NAT or firewall in between filters them, or mapped ports other than predicted (" + s + ")"
	}
	if mm := methods[m]; mm != nil {
		if why, ok := mm.explain(me, f, s); ok {
			return why
		}
	}
	return s
}

// explainConnect explains why the dialling end (from) could not connect to
// the dialled end (to, the machine b): end is which of the two, as Local
// (this host) or Remote (the target), the cause lies at; aNets are the
// dialling end's networks, if known.
func explainConnect(cause error, end End, from, to string, b identity.Machine, aNets []netip.Prefix, s string) string {
	why, _ := explainConnectNoted(cause, end, from, to, b, aNets, s)
	return why
}

// explainConnectNoted is explainConnect, and says whether its words name
// the dialled end as on a non-routed network.
func explainConnectNoted(cause error, end End, from, to string, b identity.Machine, aNets []netip.Prefix, s string) (string, bool) {
	dialling := end == Local && from == "this host" || end == Remote && from == "the target"
	if cause == ErrNoRoute && dialling {
		return fmt.Sprintf("%s has no route to %s's addresses: %s is on a non-routed network, which reaches nothing beyond its own site, so only the hubs can carry this connection", from, to, from), false
	}
	if cause == nil {
		return s, false
	}
	how := measured(cause)
	if ip, ok := natted(b); ok {
		return fmt.Sprintf("%s is behind a NAT (seen from outside as %s, an address it does not have): its own addresses are private to its site and its NAT lets no connection in (%s)", to, ip, how), false
	}
	if addrs, ok := privateOnly(b, aNets); ok {
		why := fmt.Sprintf("%s's addresses (%s) are private to its site: %s cannot reach them (%s)", to, strings.Join(addrs, ", "), from, how)
		if b.NonRouted {
			why += fmt.Sprintf("; %s has no default route: it is on a non-routed network", to)
		}
		return why, b.NonRouted
	}
	switch cause {
	case ErrTimeout:
		return fmt.Sprintf("%s's addresses did not answer: a firewall in front of %s silently drops connections from %s", to, to, from), false
	case ErrRejected:
		return fmt.Sprintf("%s's addresses answered with a reset: a firewall in front of %s rejects connections, or nothing listens there", to, to), false
	case ErrUnreachable:
		return fmt.Sprintf("a router on the way answered that %s's addresses are unreachable from %s", to, from), false
	}
	return s, false
}
