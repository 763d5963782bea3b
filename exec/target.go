package exec

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/identity"
)

// Target is where a command runs, read from the host forms ssh and the
// launchers that call it pass (ParseTarget).
type Target struct {
	// Node is the node as the caller's agent dials it: a name or ID,
	// NODE@HUB for a node at a hub.
	Node string
	// Account is the local account asked for with USER@HOST, "" if none
	// (the grid-mapfile's first for the caller).
	Account string
}

// TargetError is a host argument that names no target.
type TargetError struct {
	Text string
	Why  string
}

func (e *TargetError) Error() string {
	return fmt.Sprintf("host %q: %s", e.Text, e.Why)
}

// ParseTarget reads the host argument of gridlink exec the ways ssh reads
// its own, as far as they mean something in a grid:
//
//	NODE              a node's name or ID
//	NODE.grid         the node's name on the virtual network (NODE.grid.
//	                  too, any case): NODE
//	NODE@HUB          a node at a hub
//	USER@NODE.grid    ssh's USER@HOST: the account USER (as -l USER)
//	USER@NODE@HUB     the same at a hub
//	ssh://[USER@]HOST[:PORT]  ssh's URI form; the port is ignored
//
// With a single '@' and no zone after it, the word is NODE@HUB, as it
// always was for gridlink; an account then needs -l, or the zone's form.
func ParseTarget(s string) (Target, error) {
	bad := func(why string) (Target, error) { return Target{}, &TargetError{Text: s, Why: why} }
	rest, uri := strings.CutPrefix(s, "ssh://")
	if uri {
		rest = strings.TrimSuffix(rest, "/")
		if i := strings.LastIndexByte(rest, ':'); i >= 0 && !strings.Contains(rest[i:], "]") {
			if p, err := strconv.ParseUint(rest[i+1:], 10, 16); err != nil || p == 0 {
				return bad("the port of an ssh:// form must be 1-65535")
			}
			rest = rest[:i]
		}
	}
	var t Target
	user := false
	parts := strings.Split(rest, "@")
	switch {
	case len(parts) == 1:
	case len(parts) == 2 && (uri || inZone(parts[1])):
		t.Account, rest, user = parts[0], parts[1], true
	case len(parts) == 2:
		// NODE@HUB
	case len(parts) == 3:
		t.Account, rest, user = parts[0], parts[1]+"@"+parts[2], true
	default:
		return bad("too many '@'")
	}
	if user && !accountRE.MatchString(t.Account) {
		return bad(fmt.Sprintf("account %q: want a login name (letters, digits, '_', '.', '-'; at most 32)", t.Account))
	}
	node, hub, atHub := strings.Cut(rest, "@")
	node = strings.TrimSuffix(node, ".")
	if inZone(node) {
		node = node[:len(node)-len(control.GridDomain)]
	}
	if node == "" || atHub && hub == "" {
		return bad("no node")
	}
	t.Node = node
	if atHub {
		t.Node += "@" + hub
	}
	if strings.ContainsAny(node, ":[]") {
		return bad("not a node name")
	}
	if a, err := identity.ParseAddr(t.Node); err != nil || a.Port != 0 || a.Service != "" {
		return bad("not a node name")
	}
	return t, nil
}

// inZone says whether host is a node's name on the virtual network
// (NAME.grid or NAME.grid., any case): hostfiles of jobs whose ranks talk
// over the virtual network hold them.
func inZone(host string) bool {
	return control.HasGridDomain(strings.TrimSuffix(host, "."))
}

// dialAddr is the agent's address of node's exec service: NODE:512, or
// NODE:512@HUB for a node at a hub.
func dialAddr(node string) string {
	if n, hub, ok := strings.Cut(node, "@"); ok {
		return fmt.Sprintf("%s:%d@%s", n, Port, hub)
	}
	return fmt.Sprintf("%s:%d", node, Port)
}

// Resolve turns a target given by IP address (a launcher's hostfile may
// hold the virtual network's addresses) into the node that holds it, by
// the name the host's resolver gives the address in the zone (NODE.grid:
// the node's name server answers PTR for the virtual prefixes). Other
// targets come back as they are.
func (t Target) Resolve(ctx context.Context, r *net.Resolver) (Target, error) {
	n, hub, _ := strings.Cut(t.Node, "@")
	ip, err := netip.ParseAddr(n)
	if err != nil {
		return t, nil
	}
	if r == nil {
		r = net.DefaultResolver
	}
	names, err := r.LookupAddr(ctx, ip.String())
	for _, name := range names {
		if inZone(name) {
			host := strings.TrimSuffix(name, ".")
			t.Node = host[:len(host)-len(control.GridDomain)]
			if hub != "" {
				t.Node += "@" + hub
			}
			return t, nil
		}
	}
	why := fmt.Sprintf("no node's name (NODE%s) for the address", control.GridDomain)
	if err != nil {
		why += fmt.Sprintf(": %v", err)
	} else if len(names) > 0 {
		why += fmt.Sprintf(": it is %s", strings.Join(names, ", "))
	}
	return t, &TargetError{Text: ip.String(), Why: why}
}
