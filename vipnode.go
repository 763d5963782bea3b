package gridlink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/tun"
	"github.com/gridlink/gridlink/vconn"
	"github.com/gridlink/gridlink/vip"
)

// A node agent's virtual IP network (issue 19): the node's addresses
// derived from its identity and claimed from the hubs, its TUN device on
// the host (package tun), the packet path (package vip) between the
// device and one vconn connection per peer on vip.Port, and what the
// agent's status shows of it (vipstatus.go).

// DefaultVIPMTU is the tunnel MTU when VIPConfig.MTU is zero: the
// largest a frame carries (2-byte length, vip/frame.go) and a TUN device
// takes. The carriers between nodes are TCP byte streams (vconn
// connections), so the tunnel MTU is not bound by any path's MTU: TCP
// cuts the stream to the path, and the tunnel's cost is per packet (a
// read, a lookup, a frame, a write), so fewer, larger packets carry more.
// Measured with iperf3 between two lab hosts (wan topology, 2 shared
// cores, 2026-11-25), one flow / 8 flows:
//
//	clean link (rtt 0, unlimited; plain 3.34 / 7.75 Gbit/s):
//	  MTU 1420: 0.65 / 1.17 Gbit/s (8 flows: 52777 packets dropped, peer queue full)
//	  MTU 9000: 1.79 / 2.02 Gbit/s
//	  MTU 65535: 2.87 / 2.73 Gbit/s
//	wan 40 ms, 400 Mbit/s, 0.1% loss (plain 306 / 373 Mbit/s):
//	  MTU 1420: 239 / 221 Mbit/s; 9000: 246 / 277; 65535: 242 / 266
//	ping under one flow there (plain 43.5 ms average):
//	  MTU 1420: 76.5 ms; 9000: 86.5 ms; 65535: 73.2 ms
//
// 65535 is the fastest on a clean link and no worse across the wan, in
// throughput or in latency under load. Every node of a grid should use
// the same MTU: a node whose device takes less cannot deliver larger
// packets.
const DefaultVIPMTU = 65535

// The virtual network's defaults, for the command line's help.
var (
	DefaultVIPPrefix4 = vip.DefaultPrefix4
	DefaultVIPPrefix6 = vip.DefaultPrefix6
)

// DefaultVIPCarriers is the most connections to one peer when
// VIPConfig.Carriers is zero (vip.DefaultCarriers).
const DefaultVIPCarriers = vip.DefaultCarriers

// DefaultVIPDevice is the TUN device's name when VIPConfig.Device is
// empty.
const DefaultVIPDevice = tun.DefaultName

// vipClaimTries bounds the candidates a node tries when its addresses
// are held by other nodes (vip.Addrs' counter 0, 1, ...).
const vipClaimTries = 8

// vipClaimWait bounds one claim, the wait for a hub included.
const vipClaimWait = 30 * time.Second

// VIPConfig configures a node agent's virtual IP network. The zero value
// leaves it off.
type VIPConfig struct {
	// On starts the virtual network: a TUN device holding the node's
	// addresses, packets to other nodes' addresses carried over the
	// overlay. It needs a hub (the addresses are claimed from the hubs
	// and looked up through them) and root or CAP_NET_ADMIN.
	On bool
	// Prefix4 and Prefix6 are the network's prefixes, the same on every
	// node of the grid; zero: vip.DefaultPrefix4 (100.96.0.0/12) and
	// vip.DefaultPrefix6 (fd67:726c::/32).
	Prefix4, Prefix6 netip.Prefix
	// Device is the TUN device's name; empty: tun.DefaultName
	// ("gridlink0").
	Device string
	// MTU is the tunnel MTU; zero: DefaultVIPMTU.
	MTU int
	// Rules are the node's access rules: who may reach which of its
	// ports over the virtual network; zero: every member reaches
	// everything.
	Rules VIPRules
	// Names are the network's names (NODE.grid): the zero value serves
	// them and points the host's resolver at them (VIPNames).
	Names VIPNames
	// Carriers is the most connections to one peer: while packets of
	// several flows go to a peer on a shortcut, more connections are
	// opened to it, each flow on one (many flows across a lossy long
	// link get many congestion windows, not one); the two nodes use
	// the smaller of their counts; zero: DefaultVIPCarriers; 1: one
	// connection per peer.
	Carriers int
}

// ErrVIPNeedsHub: the virtual network was asked for on a node without
// hubs.
var ErrVIPNeedsHub = errors.New("the virtual network needs a hub: a node's addresses are claimed from the hubs and looked up through them")

// VIPClaimError is a node that found every candidate address held by
// other nodes (vipClaimTries of them): the last refusal of each.
type VIPClaimError struct {
	Tries int
	Errs  []error // each an errors.Join of *hub.AddrTakenError
}

func (e *VIPClaimError) Error() string {
	return fmt.Sprintf("virtual network: %d candidate addresses all held by other nodes; last: %v", e.Tries, e.Errs[len(e.Errs)-1])
}

func (e *VIPClaimError) Unwrap() []error { return e.Errs }

func (c VIPConfig) withDefaults() VIPConfig {
	if !c.Prefix4.IsValid() {
		c.Prefix4 = vip.DefaultPrefix4
	}
	if !c.Prefix6.IsValid() {
		c.Prefix6 = vip.DefaultPrefix6
	}
	if c.Device == "" {
		c.Device = tun.DefaultName
	}
	if c.MTU == 0 {
		c.MTU = DefaultVIPMTU
	}
	return c
}

// vipNode is a running virtual network on a node.
type vipNode struct {
	cfg     VIPConfig
	node    *vconn.Node
	log     *slog.Logger
	v4, v6  netip.Addr
	net     *vip.Network
	ln      *vconn.Listener
	carrLn  *vconn.Listener // vip.CarrierPort
	peers   *vipPeers
	devName string
	names   *vipNames // nil with Names.Off
}

// startVIP claims the node's addresses, puts its device on the host and
// starts the packet path and the vip.Port service.
func startVIP(ctx context.Context, node *vconn.Node, cfg VIPConfig, log *slog.Logger) (*vipNode, error) {
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.Default()
	}
	s := node.Session()
	if s == nil {
		return nil, ErrVIPNeedsHub
	}
	if _, _, err := vip.Addrs(cfg.Prefix4, cfg.Prefix6, node.ID(), 0); err != nil {
		return nil, err
	}
	v := &vipNode{cfg: cfg, node: node, log: log, peers: newVIPPeers()}
	var err error
	if v.v4, v.v6, err = claimAddrs(ctx, s, cfg, node.ID(), log); err != nil {
		return nil, err
	}
	host, err := tun.Setup(tun.HostConfig{Name: cfg.Device, MTU: cfg.MTU,
		Addrs: []netip.Prefix{netip.PrefixFrom(v.v4, cfg.Prefix4.Bits()), netip.PrefixFrom(v.v6, cfg.Prefix6.Bits())}})
	if err != nil {
		return nil, fmt.Errorf("virtual network: %w", err)
	}
	v.devName = cfg.Device
	res := &vipResolver{s: s, peers: v.peers}
	v.net, err = vip.New(vip.Config{Device: host, ID: node.ID(), Addrs: []netip.Addr{v.v4, v.v6}, Resolver: res,
		Dialer: &vipDialer{node: node, peers: v.peers}, MTU: cfg.MTU, Logger: log, Rules: cfg.Rules, Carriers: cfg.Carriers})
	if err != nil {
		host.Close()
		return nil, err
	}
	if err = v.listen(); err != nil {
		v.net.Close()
		return nil, err
	}
	if !cfg.Names.Off {
		if v.names, err = startNames(ctx, &Node{n: node}, cfg.Names, []netip.Prefix{cfg.Prefix4, cfg.Prefix6}, cfg.Device); err != nil {
			v.close()
			return nil, err
		}
	}
	return v, nil
}

// addrClaimer is the hub session's claiming side (hub.Session).
type addrClaimer interface {
	ClaimAddrs(ctx context.Context, v4, v6 netip.Addr) error
}

// claimAddrs claims the node's addresses from its hub: the first
// candidate (vip.Addrs' counter 0) and, while another node holds one of
// them, the next, vipClaimTries at most. A node whose hub does not answer
// keeps the first candidate: its session claims it on attachment.
func claimAddrs(ctx context.Context, s addrClaimer, cfg VIPConfig, id identity.ID, log *slog.Logger) (v4, v6 netip.Addr, err error) {
	var refusals []error
	for counter := range uint32(vipClaimTries) {
		if v4, v6, err = vip.Addrs(cfg.Prefix4, cfg.Prefix6, id, counter); err != nil {
			return v4, v6, err
		}
		cctx, cancel := context.WithTimeout(ctx, vipClaimWait)
		err = s.ClaimAddrs(cctx, v4, v6)
		cancel()
		var taken *hub.AddrTakenError
		switch {
		case err == nil:
			return v4, v6, nil
		case errors.Is(err, hub.ErrAddrOutside): // every candidate would be
			return v4, v6, fmt.Errorf("virtual network: %w", err)
		case errors.As(err, &taken):
			log.Warn("virtual network: address held by another node, trying the next candidate",
				"addr", taken.Addr, "holder", taken.Holder.Name, "holder_id", taken.Holder.ID.Short(), "hub", taken.Hub, "err", err)
			refusals = append(refusals, err)
		case errors.Is(err, hub.ErrNoVirtual), ctx.Err() != nil:
			return v4, v6, fmt.Errorf("virtual network: %w", err)
		default:
			var na *hub.NotAttachedError
			if !errors.As(err, &na) && !errors.Is(err, context.DeadlineExceeded) {
				return v4, v6, fmt.Errorf("virtual network: claim %s, %s: %w", v4, v6, err)
			}
			log.Warn("virtual network: no hub answers the claim now; keeping the addresses, claimed again on attachment", "v4", v4, "v6", v6, "err", err)
			return v4, v6, nil
		}
	}
	return v4, v6, &VIPClaimError{Tries: vipClaimTries, Errs: refusals}
}

// serve hands every connection accepted on vip.Port to the packet path
// with the identity vconn authenticated.
func (v *vipNode) serve() {
	for {
		c, err := v.ln.Accept()
		if err != nil {
			return
		}
		vc := c.(*vconn.Conn)
		id := vc.Peer().ID
		v.peers.machine(vc.Peer())
		if err := v.net.Accept(v.peers.track(id, vc), id); err != nil {
			return
		}
	}
}

// listen serves vip.Port and vip.CarrierPort for the packet path.
func (v *vipNode) listen() error {
	var err error
	if v.ln, err = v.node.Listen(vip.Port); err != nil {
		return err
	}
	if v.carrLn, err = v.node.Listen(vip.CarrierPort); err != nil {
		v.ln.Close()
		return err
	}
	go v.serve()
	go v.serveCarriers()
	return nil
}

// serveCarriers hands every connection accepted on vip.CarrierPort to
// the packet path as a carrier of its peer (its hello read first).
func (v *vipNode) serveCarriers() {
	for {
		c, err := v.carrLn.Accept()
		if err != nil {
			return
		}
		vc := c.(*vconn.Conn)
		id := vc.Peer().ID
		go v.net.AcceptCarrier(v.peers.track(id, vc), id) // refusals are logged there
	}
}

// close stops the service and the packet path, which takes the device
// off the host.
func (v *vipNode) close() error {
	var err error
	if v.names != nil {
		err = v.names.close()
	}
	v.ln.Close()
	v.carrLn.Close()
	return errors.Join(err, v.net.Close())
}

// vipResolver finds a virtual address's node through the hubs
// (hub.Session.LookupAddr) and remembers the answers for the status.
type vipResolver struct {
	s     *hub.Session
	peers *vipPeers
}

func (r *vipResolver) Resolve(ctx context.Context, a netip.Addr) (identity.ID, error) {
	m, err := r.s.LookupAddr(ctx, a)
	if err != nil {
		if _, ok := errors.AsType[*hub.AddrNotFoundError](err); ok {
			return identity.ID{}, fmt.Errorf("%w: %v", vip.ErrNoNode, err)
		}
		return identity.ID{}, err
	}
	r.peers.resolved(a, m)
	return m.ID, nil
}

// errNoShortcut is DialShortcut's answer when no shortcut method can work
// toward the peer (vip stops trying for a while).
var errNoShortcut = vip.ErrNoShortcut

// vipDialer opens packet connections to peers' vip.Port through vconn.
type vipDialer struct {
	node  *vconn.Node
	peers *vipPeers
}

// DialPeer dials the peer by the normal race (routed starts at once,
// after its head start, and the most direct method that works wins).
func (d *vipDialer) DialPeer(ctx context.Context, id identity.ID) (net.Conn, error) {
	c, err := d.node.Dial(ctx, identity.Addr{Node: id.String(), Port: vip.Port}.String())
	if err != nil {
		return nil, err
	}
	d.peers.machine(c.Peer())
	return d.peers.track(id, c), nil
}

// DialShortcut dials the peer by direct, reverse or splice only; when
// none of them can work toward it, errNoShortcut.
func (d *vipDialer) DialShortcut(ctx context.Context, id identity.ID) (net.Conn, error) {
	m, err := d.node.Resolve(ctx, identity.Addr{Node: id.String()})
	if err != nil {
		return nil, err
	}
	c, err := d.node.DialMachineVia(ctx, m, vip.Port, vconn.Direct, vconn.Reverse, vconn.Splice)
	if errors.Is(err, vconn.ErrNoneApplies) {
		return nil, fmt.Errorf("%w: %v", errNoShortcut, err)
	}
	if err != nil {
		return nil, err
	}
	d.peers.machine(c.Peer())
	return d.peers.track(id, c), nil
}

// DialCarrier dials one more connection to the peer's vip.CarrierPort by
// method, the method of the peer's main connection.
func (d *vipDialer) DialCarrier(ctx context.Context, id identity.ID, method vconn.Method) (net.Conn, error) {
	m, err := d.node.Resolve(ctx, identity.Addr{Node: id.String()})
	if err != nil {
		return nil, err
	}
	c, err := d.node.DialMachineVia(ctx, m, vip.CarrierPort, method)
	if err != nil {
		return nil, err
	}
	return d.peers.track(id, c), nil
}
