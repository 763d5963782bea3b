package gridlink

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/gridlink/gridlink/agent"
	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/status"
	"github.com/gridlink/gridlink/tun"
	"github.com/gridlink/gridlink/vip"
	"github.com/gridlink/gridlink/vip/dns"
)

// The virtual network without root (issue 19, `gridlink vip exec`): a
// user's agent, started without VIPConfig.On, runs the node's virtual
// network on a TUN device that `gridlink vip exec` made in a user and
// network namespace of its own and handed over its control socket
// (agent/vipdevice.go, control/vip.go). vipHost is the agent's VIPHost:
// it claims the node's addresses once (they stay claimed while the agent
// runs, so every exec gets the same ones) and runs vip's packet path on
// each handed device, and the names on the sockets handed with it, until
// the exec ends.

// VIPNameServer is where `gridlink vip exec` serves the names inside its
// namespace (the namespace's own loopback; its resolv.conf names it).
const VIPNameServer = "127.0.0.153:53"

// vipHost runs the virtual network on handed devices.
type vipHost struct {
	a    *Agent
	cfg  VIPConfig
	log  *slog.Logger
	mu   sync.Mutex
	v4   netip.Addr // claimed; invalid until the first device
	v6   netip.Addr
	stop func() error // the running device's; nil if none
	// onHost: the node's network runs on the host's device (VIPConfig.On).
	onHost string
}

func newVIPHost(a *Agent, cfg AgentConfig) *vipHost {
	h := &vipHost{a: a, cfg: cfg.VIP.withDefaults(), log: slog.Default()}
	if cfg.Node.Logger != nil {
		h.log = cfg.Node.Logger.With("node", a.a.Node().Name())
	}
	if a.vip != nil {
		h.onHost = a.vip.devName
	}
	return h
}

// Setup claims the node's addresses (once) and says what the device must
// hold.
func (h *vipHost) Setup(ctx context.Context, names bool) (control.VIPSetup, error) {
	if h.onHost != "" {
		return control.VIPSetup{}, &control.StreamError{Kind: control.KindBusy,
			Msg: fmt.Sprintf("this node's virtual network runs on the host's device %s (gridlink node --vip): run the program directly, without gridlink vip exec", h.onHost)}
	}
	node := h.a.a.Node()
	s := node.Session()
	if s == nil {
		return control.VIPSetup{}, &control.StreamError{Kind: control.KindNotAllowed, Msg: ErrVIPNeedsHub.Error() + " (start the agent with --hub)"}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.v4.IsValid() {
		v4, v6, err := claimAddrs(ctx, s, h.cfg, node.ID(), h.log)
		if err != nil {
			return control.VIPSetup{}, err
		}
		h.v4, h.v6 = v4, v6
	}
	st := control.VIPSetup{MTU: h.cfg.MTU, Addrs: []string{
		netip.PrefixFrom(h.v4, h.cfg.Prefix4.Bits()).String(), netip.PrefixFrom(h.v6, h.cfg.Prefix6.Bits()).String()}}
	if names {
		st.NameServer, st.Zone = VIPNameServer, dns.DefaultZone
	}
	return st, nil
}

// Run runs the packet path on dev and the names on names' sockets.
func (h *vipHost) Run(dev tun.Device, names *agent.NameSockets) (func() error, error) {
	node := h.a.a.Node()
	s := node.Session()
	if s == nil {
		return nil, ErrVIPNeedsHub
	}
	name, _ := dev.Name()
	h.mu.Lock()
	v := &vipNode{cfg: h.cfg, node: node, log: h.log, peers: newVIPPeers(), v4: h.v4, v6: h.v6, devName: name}
	h.mu.Unlock()
	var err error
	v.net, err = vip.New(vip.Config{Device: dev, ID: node.ID(), Addrs: []netip.Addr{v.v4, v.v6},
		Resolver: &vipResolver{s: s, peers: v.peers}, Dialer: &vipDialer{node: node, peers: v.peers}, MTU: h.cfg.MTU, Logger: h.log, Rules: h.cfg.Rules, Carriers: h.cfg.Carriers})
	if err != nil {
		return nil, err
	}
	if err = v.listen(); err != nil {
		v.net.Close()
		return nil, err
	}
	var ns *dns.Server
	done := make(chan error, 1)
	cancel := func() {}
	if names != nil {
		n := h.a.node
		if ns, err = dns.New(dns.Config{Lookup: n.LookupVirtual, LookupAddr: n.lookupVirtualName, Prefixes: []netip.Prefix{h.cfg.Prefix4, h.cfg.Prefix6}}); err != nil {
			v.close()
			names.UDP.Close()
			names.TCP.Close()
			return nil, err
		}
		var ctx context.Context
		ctx, cancel = context.WithCancel(context.Background())
		go func() { done <- ns.Serve(ctx, names.UDP, names.TCP) }()
	}
	h.a.a.SetStatus(func(st *status.Agent) { st.VIP = v.status() })
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() {
			h.a.a.SetStatus(nil)
			stopErr = v.close()
			if ns != nil {
				cancel()
				<-done
				ns.Close()
			}
			h.mu.Lock()
			h.stop = nil
			h.mu.Unlock()
		})
		return stopErr
	}
	h.mu.Lock()
	h.stop = stop
	h.mu.Unlock()
	return stop, nil
}

// close stops the running device's network, if any (the agent's Close).
func (h *vipHost) close() error {
	h.mu.Lock()
	stop := h.stop
	h.mu.Unlock()
	if stop == nil {
		return nil
	}
	return stop()
}
