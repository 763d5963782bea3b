package vconn

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/proxy"
	"github.com/gridlink/gridlink/wire"
)

// Access control. Every virtual connection is mutually authenticated end
// to end: with a grid CA (Config.Creds), both ends' certificate chains are
// checked in the handshake, whatever the setup method, and relaying hubs
// see only ciphertext. On top, the accepting end asks its listener: a
// proxy chain restricted to some services may reach only those (Service
// names the port), and of an entry SERVICE@NODEID only at the node whose
// identity key is NODEID (this node's own, Config.Key); a listener's Allow
// may refuse by subject or group (pki.Members).
//
// The service directory (DirectoryPort, where NODE:NAME is looked up) is
// open to a restricted proxy wherever its restriction reaches this node
// at all: a lookup reveals only a name's port, and the connection to that
// port is judged by the restriction as any other. A refusal's reason reaches the dialler: in the
// handshake's verdict (direct, reverse, splice, routed), or in the answer
// to a spare's port request.

// DirectoryPort is the virtual port of a node agent's service directory
// (agent.ServicesPort): the names given to exposed services.
const DirectoryPort = 11

// ServiceName is the name a port goes by in proxy restrictions: a
// well-known service's name ("echo"), else "port-N".
func ServiceName(port uint16) string {
	for name, p := range services {
		if p == port {
			return name
		}
	}
	return "port-" + strconv.Itoa(int(port))
}

// ParseService is the port a service name of proxy restrictions names:
// a well-known service's name, or "port-N" for a port without one. Any
// other name is an error listing the names accepted (restrictions name no
// other: a service exposed under a name goes by its port, port-N).
func ParseService(name string) (uint16, error) {
	if p, ok := services[name]; ok {
		return p, nil
	}
	if n, ok := strings.CutPrefix(name, "port-"); ok {
		p, err := strconv.ParseUint(n, 10, 16)
		switch {
		case err != nil || p == 0 || strconv.FormatUint(p, 10) != n:
		case ServiceName(uint16(p)) != name:
			return 0, fmt.Errorf("service %q: port %d goes by %q", name, p, ServiceName(uint16(p)))
		default:
			return uint16(p), nil
		}
	}
	return 0, fmt.Errorf("unknown service %q: want %s, or port-N for port N (1-65535; a service exposed by name goes by its port)", name, wellKnownNames())
}

func wellKnownNames() string {
	var names []string
	for name := range services {
		names = append(names, name)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// ServiceOf names the service a virtual address (NODE:PORT, see
// identity.Addr) reaches, as ServiceName does: what a proxy restricted to
// that service must list.
func ServiceOf(addr string) (string, error) {
	a, err := identity.ParseAddr(addr)
	if err != nil {
		return "", err
	}
	port, err := portOf(a)
	if err != nil {
		return "", fmt.Errorf("%s: %w", addr, err)
	}
	return ServiceName(port), nil
}

// portOf is the port an address names, by number or service name.
func portOf(a identity.Addr) (uint16, error) {
	port := a.Port
	if a.Service != "" {
		if port = services[a.Service]; port == 0 {
			return 0, fmt.Errorf("unknown service %q", a.Service)
		}
	}
	if port == 0 {
		return 0, errors.New("no port")
	}
	return port, nil
}

// access decides whether peer may connect to port: a listener there, the
// peer's proxy restriction, and the listener's Allow.
func (n *Node) access(port uint16, peer pki.Peer) error {
	l := n.listener(port)
	if l == nil {
		return fmt.Errorf("%s", n.refusal(port))
	}
	if err := n.restriction(port, peer); err != nil {
		return err
	}
	if l.allow != nil {
		if err := l.allow(peer); err != nil {
			return fmt.Errorf("%s at %s refuses %s: %w", ServiceName(port), n.cfg.Name, peer, err)
		}
	}
	return nil
}

// admitDirect judges the other end of a direct handshake by what it asked
// for: a connection to one of our ports (we accept), or a reverse setup
// calling back (we are the target calling the dialler: it wants our port).
// Spares name their port later (holdSpare); splices are judged by the
// target, which knows the port.
func (n *Node) admitDirect(peer pki.Peer, req string, dialling bool) error {
	r, err := parseRequest(req)
	if err != nil {
		return err
	}
	switch {
	case r.spare:
		return nil
	case r.reverse:
		if !dialling {
			return nil // our own reverse setup: the target judges us
		}
		n.rdv.mu.Lock()
		port, ok := n.rdv.callbacks[r.token]
		n.rdv.mu.Unlock()
		if !ok || port == wire.SparePort {
			return nil // a spare is judged when its port is asked
		}
		return n.access(port, peer)
	case r.splice:
		n.rdv.mu.Lock()
		p := n.rdv.splices[r.token]
		n.rdv.mu.Unlock()
		if p == nil || p.goes == nil {
			return nil // we dial: the target judges us
		}
		if p.port == wire.SparePort {
			return nil // a spare is judged when its port is asked
		}
		return n.access(p.port, peer)
	}
	if dialling {
		return nil
	}
	return n.access(r.port, peer)
}

// restriction checks port against the peer's proxy restriction, here.
func (n *Node) restriction(port uint16, peer pki.Peer) error {
	if peer.Chain == nil || peer.Chain.Restriction == nil {
		return nil
	}
	svc, self := ServiceName(port), n.ID()
	if peer.Allows(svc, self) {
		return nil
	}
	r := peer.Chain.Restriction
	if port == DirectoryPort && proxy.ReachesNode(r, self) {
		return nil
	}
	if !proxy.ReachesNode(r, self) {
		return fmt.Errorf("%s may not use %s at %s: its proxy is restricted to %s, and this node is %s", peer, svc, n.cfg.Name, describe(r), self.Short())
	}
	return fmt.Errorf("%s may not use %s at %s: its proxy is restricted to %s", peer, svc, n.cfg.Name, describe(r))
}

// describe prints a restriction for a refusal, IDs shortened (refusals
// travel in at most 255 bytes): [echo, port-2811 at node tuus3kcklo].
func describe(r []string) string {
	parts := make([]string, len(r))
	for i, e := range r {
		svc, node := proxy.SplitEntry(e)
		if id, err := identity.ParseID(node); err == nil {
			svc += " at node " + id.Short()
		}
		parts[i] = svc
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
