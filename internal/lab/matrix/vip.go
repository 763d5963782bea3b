package matrix

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/status"
)

// Options say how StartOverlayWith runs an overlay. The zero value is
// StartOverlay's: the lab CA, a node agent on every site's matrix host,
// no virtual network.
type Options struct {
	// Open runs the overlay without the lab CA (StartOpenOverlay).
	Open bool
	// Hosts run the node agents (each named by its host's ID); nil:
	// every site's matrix host.
	Hosts []*topology.Host
	// VIP starts every node agent with --vip (the virtual IP network,
	// with its names: NAME.grid for a node NAME) and waits until each
	// shows its virtual addresses in `gridlink status --json`
	// (Overlay.VIP has them).
	VIP bool
	// NodeArgs, if set, are more arguments for the node agent on h
	// (e.g. access rules of the virtual network).
	NodeArgs func(h *topology.Host) []string
	// HubControl, if set, is where the hub of each site serves its
	// status socket (a path: readable from other namespaces, as the
	// dashboard's test reads all six); else the default, abstract and per
	// namespace (which Overlay.HubStatus and WaitStable ask).
	HubControl func(site string) string
	// HubArgs, if set, are more arguments for the hub of each site
	// (e.g. --metrics).
	HubArgs func(site string) []string
	// Wrap, if set, is a command line the node agent on h runs under
	// inside its namespace: argv that ends by running the rest (e.g.
	// unshare and a shell that sets a host name, then exec "$@").
	// Whatever the agent starts (gridlink exec's commands) runs under it
	// too.
	Wrap func(h *topology.Host) []string
}

func (opts Options) hosts(t *topology.Topology) []*topology.Host {
	if opts.Hosts != nil {
		return opts.Hosts
	}
	var hs []*topology.Host
	for _, s := range t.Sites {
		hs = append(hs, s.MatrixHost())
	}
	return hs
}

func (opts Options) nodeArgs(h *topology.Host) []string {
	var args []string
	if opts.VIP {
		args = append(args, "--vip")
	}
	if opts.NodeArgs != nil {
		args = append(args, opts.NodeArgs(h)...)
	}
	return args
}

// VIP is a node's place on the overlay's virtual network.
type VIP struct {
	Host   *topology.Host
	Name   string     // the node's name (its host's ID): NAME.grid
	V4, V6 netip.Addr // its virtual addresses
	Device string     // its TUN device
}

// Nodes are the hosts that run the overlay's node agents.
func (o *Overlay) Nodes() []*topology.Host { return o.nodes }

// VIP is node h's place on the virtual network (an overlay started with
// Options.VIP), as its status showed it once up.
func (o *Overlay) VIP(h *topology.Host) (VIP, bool) {
	v, ok := o.vip[h]
	return v, ok
}

// VIPs are every node's places on the virtual network, in the order of
// Nodes.
func (o *Overlay) VIPs() []VIP {
	var out []VIP
	for _, h := range o.nodes {
		if v, ok := o.vip[h]; ok {
			out = append(out, v)
		}
	}
	return out
}

// Status is the node agent on h's `gridlink status --json`.
func (o *Overlay) Status(ctx context.Context, h *topology.Host) (*status.Agent, error) {
	out, err := o.run(ctx, h, "status", "--json")
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", h.ID(), err)
	}
	var st status.Agent
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("status of %s: %w\n%s", h.ID(), err, out)
	}
	return &st, nil
}

// VIPStatus is the virtual network's part of the node agent on h's
// status; an error if it runs none.
func (o *Overlay) VIPStatus(ctx context.Context, h *topology.Host) (*status.VIP, error) {
	st, err := o.Status(ctx, h)
	if err != nil {
		return nil, err
	}
	if st.VIP == nil {
		return nil, fmt.Errorf("status of %s: no virtual network", h.ID())
	}
	return st.VIP, nil
}

// parseVIP reads a node's addresses from its status.
func parseVIP(h *topology.Host, v *status.VIP) (VIP, error) {
	out := VIP{Host: h, Name: h.ID(), Device: v.Device}
	for _, s := range v.Addrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return VIP{}, fmt.Errorf("status of %s: virtual address %q: %w", h.ID(), s, err)
		}
		if p.Addr().Is4() {
			out.V4 = p.Addr()
		} else {
			out.V6 = p.Addr()
		}
	}
	if !out.V4.IsValid() || !out.V6.IsValid() {
		return VIP{}, fmt.Errorf("status of %s: virtual addresses %v, want an IPv4 and an IPv6 one", h.ID(), v.Addrs)
	}
	return out, nil
}

// vipWait bounds the wait for a node's virtual network after its agent
// answers (its addresses are claimed from the hubs).
const vipWait = 40 * time.Second

// waitVIP waits until every node's status shows its virtual addresses,
// and records them.
func (o *Overlay) waitVIP(ctx context.Context) error {
	o.vip = map[*topology.Host]VIP{}
	for _, h := range o.nodes {
		deadline := time.Now().Add(vipWait)
		for {
			st, err := o.VIPStatus(ctx, h)
			if err == nil {
				v, perr := parseVIP(h, st)
				if perr == nil {
					o.vip[h] = v
					break
				}
				err = perr
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				log, _ := os.ReadFile(LogFile(h, "node"))
				if len(log) > 4000 {
					log = log[len(log)-4000:]
				}
				return fmt.Errorf("the virtual network of %s not up in %v: %v\n%s", h.ID(), vipWait, err, log)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}
