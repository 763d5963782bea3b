package vconn

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/portmap"
)

// Port mapping (Config.PortMap): after Start, the node asks its NAT
// gateway for an inbound TCP mapping to its direct listener's port (UPnP
// IGD or NAT-PMP, package portmap), in the background, and advertises the
// mapping's external endpoint as one more of its addresses: in its
// machine identifier, and so to its hub (hub.Session.SetMachine), whose
// lookups give it to others. The endpoint is public, so direct.Order has
// others try it before the node's private addresses; a peer anywhere then
// reaches the node by the direct method, whatever its NAT's port
// allocation. The mapping is renewed by package portmap; a new external
// endpoint is advertised again; Close deletes the mapping at the gateway.
const (
	portMapLease = 10 * time.Minute // the lease asked for (renewed at half)
	portMapRetry = 5 * time.Minute  // after a failed attempt
	// portMapWait bounds one attempt. It is not cut short by Close: a
	// request the gateway granted must not be left behind unanswered, so
	// Close waits for an attempt in flight (portmap's timeouts: seconds).
	portMapWait    = 15 * time.Second
	maxDescription = 64
)

// mapping is what the node needs of a *portmap.Mapping (a fake in tests).
type mapping interface {
	Status() portmap.Status
	Close() error
}

// mapPort asks the gateway for a mapping. Unit tests replace it: they
// must not probe any network.
var mapPort = func(ctx context.Context, cfg portmap.Config, port uint16) (mapping, error) {
	m, err := portmap.Map(ctx, cfg, port)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// portMapState is the node's port mapping.
type portMapState struct {
	adv sync.Mutex // serializes advertising, so that the hub hears the latest last

	mu     sync.Mutex
	mapped bool
	st     portmap.Status
	err    error     // why there is no mapping, or its last renewal's error
	at     time.Time // of the last attempt or change
	ext    netip.AddrPort
}

// PortMapState is the node's port mapping, for status displays.
type PortMapState struct {
	Enabled    bool           // Config.PortMap
	Mapped     bool           // a mapping is held (Status says which)
	Status     portmap.Status // the mapping, when Mapped
	Err        error          // why there is none (the last attempt's error), or its last renewal's
	At         time.Time      // when it was last tried or changed; zero: not yet
	Advertised netip.AddrPort // the endpoint advertised to others; invalid: none
}

// PortMap returns the state of the node's port mapping.
func (n *Node) PortMap() PortMapState {
	p := &n.pm
	p.mu.Lock()
	defer p.mu.Unlock()
	return PortMapState{Enabled: n.cfg.PortMap, Mapped: p.mapped, Status: p.st, Err: p.err, At: p.at, Advertised: p.ext}
}

// withMapped adds the advertised external endpoint to m's addresses.
func (n *Node) withMapped(m identity.Machine) identity.Machine {
	n.pm.mu.Lock()
	ext := n.pm.ext
	n.pm.mu.Unlock()
	if ext.IsValid() && !slices.Contains(m.Addrs, ext) {
		m.Addrs = append(slices.Clone(m.Addrs), ext)
	}
	return m
}

// startPortMap starts keeping a mapping if the configuration asks for one.
func (n *Node) startPortMap() {
	if !n.cfg.PortMap {
		return
	}
	n.wg.Add(1)
	go n.keepPortMap()
}

// keepPortMap maps the direct listener's port, retrying every
// portMapRetry, holds the mapping until the node closes and then deletes
// it.
func (n *Node) keepPortMap() {
	defer n.wg.Done()
	port := n.direct.Port()
	desc := "gridlink " + n.cfg.Name
	if len(desc) > maxDescription {
		desc = desc[:maxDescription]
	}
	cfg := portmap.Config{Lifetime: portMapLease, Description: desc, OnChange: n.portMapChanged}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), portMapWait)
		m, err := mapPort(ctx, cfg, port)
		cancel()
		if err != nil {
			n.cfg.Logf("vconn: node %s: no port mapping (trying again in %v): %v", n.cfg.Name, portMapRetry, err)
			n.pm.mu.Lock()
			n.pm.err, n.pm.at = err, time.Now()
			n.pm.mu.Unlock()
			select {
			case <-n.ctx.Done():
				return
			case <-time.After(portMapRetry):
				continue
			}
		}
		n.cfg.Logf("vconn: node %s: %s", n.cfg.Name, m.Status())
		n.portMapChanged(m.Status())
		<-n.ctx.Done()
		st := m.Status()
		if err := m.Close(); err != nil {
			n.cfg.Logf("vconn: node %s: %v", n.cfg.Name, err)
		} else {
			n.cfg.Logf("vconn: node %s: deleted the port mapping %s", n.cfg.Name, st.External)
		}
		n.pm.mu.Lock()
		n.pm.mapped, n.pm.ext, n.pm.err, n.pm.at = false, netip.AddrPort{}, errors.New("the node stopped"), time.Now()
		n.pm.mu.Unlock()
		return
	}
}

// portMapChanged records a new state of the mapping (granted, renewed to
// another endpoint, failed to renew) and advertises what changed.
func (n *Node) portMapChanged(st portmap.Status) {
	ext := netip.AddrPort{}
	if st.Err == nil || st.Lifetime == 0 || time.Now().Before(st.Expires) {
		ext = st.External // a lease that failed to renew holds until it expires
	}
	if ext.IsValid() && n.cfg.ListenAddr != "" {
		if a, err := netip.ParseAddr(n.cfg.ListenAddr); err == nil && !a.IsUnspecified() && a.Unmap() != st.Internal.Addr().Unmap() {
			n.cfg.Logf("vconn: node %s: the mapping leads to %s, but the direct listener is bound to %s: not advertised", n.cfg.Name, st.Internal, a)
			ext = netip.AddrPort{}
		}
	}
	n.pm.mu.Lock()
	changed := ext != n.pm.ext
	n.pm.mapped, n.pm.st, n.pm.err, n.pm.at, n.pm.ext = true, st, st.Err, time.Now(), ext
	n.pm.mu.Unlock()
	if st.Err != nil {
		n.cfg.Logf("vconn: node %s: port mapping renewal failed: %v", n.cfg.Name, st.Err)
	}
	if changed {
		n.advertise()
	}
}

// advertise tells the hub this node's addresses as they are now.
func (n *Node) advertise() {
	if n.session == nil {
		return
	}
	n.pm.adv.Lock()
	defer n.pm.adv.Unlock()
	m := n.localMachine()
	if err := n.session.SetMachine(m); err != nil && !errors.Is(err, hub.ErrClosed) {
		n.cfg.Logf("vconn: node %s: cannot advertise addresses %v: %v", n.cfg.Name, m.Addrs, err)
		return
	}
	n.cfg.Logf("vconn: node %s: advertised addresses %v", n.cfg.Name, m.Addrs)
}
