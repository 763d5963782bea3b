package gridlink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/gridlink/gridlink/agent"
	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/metrics"
	"github.com/gridlink/gridlink/status"
	"github.com/gridlink/gridlink/vconn"
	"github.com/gridlink/gridlink/vip"
)

// Node start-up, in one place for every command and program that runs a
// node: Start (a long-running node), StartAttached (a one-shot task's,
// which needs its hub), StartAgent (the node agent's node), and what a long-running node reports while it runs (Hold,
// WatchAttach).

// attachWait bounds StartAttached's wait when ctx has no earlier deadline.
const attachWait = 30 * time.Second

// Start brings a node up: its key and credentials, its direct listener
// and, if Config.Hubs names any (or Discover finds them), its hub
// attachment. It waits for the first round of attempts to attach (3 s at
// most): a hub's refusal fails it; a hub that does not answer does not,
// the node keeps attaching in the background (see WaitAttached).
func Start(ctx context.Context, cfg Config) (*Node, error) {
	n, err := start(ctx, cfg)
	if err != nil {
		return nil, whatToDo(err)
	}
	return n, nil
}

func start(ctx context.Context, cfg Config) (*Node, error) {
	vc, err := cfg.node(ctx)
	if err != nil {
		return nil, err
	}
	n, err := vconn.Start(ctx, vc)
	if err != nil {
		return nil, err
	}
	return &Node{n: n, creds: vc.Creds}, nil
}

// StartAttached starts the node of a one-shot task (a copy, a perf
// client), which needs a hub: it also waits for the attachment as long as
// ctx allows (30 s at most), and fails if it does not come. With a proxy
// file (Credentials.Proxy) the node has an identity of its own, a proxy
// of that proxy made in memory (oneshot.go), so the user's agent or
// another command with the same proxy holds none of it.
func StartAttached(ctx context.Context, cfg Config) (*Node, error) {
	cfg, shared, err := cfg.ownIdentity()
	if err != nil {
		return nil, err
	}
	n, err := start(ctx, cfg)
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, attachWait)
		err = n.WaitAttached(wctx)
		cancel()
		if err != nil {
			n.Close()
		}
	}
	switch {
	case err == nil:
		return n, nil
	case shared != nil && errors.Is(err, ErrIdentityAttached):
		return nil, fmt.Errorf("%w: %w", err, shared)
	}
	return nil, whatToDo(err)
}

// whatToDo adds to a hub's refusal of a second process with the node's
// identity (ErrIdentityAttached: a user's agent runs with the same proxy,
// say) what the user can do.
func whatToDo(err error) error {
	if errors.Is(err, ErrIdentityAttached) {
		return fmt.Errorf("%w: use it (gridlink nc, socks, forward, expose and exec go through a running agent), stop it, or give this command an identity of its own (a proxy of its own: gridlink proxy init --out FILE, then --proxy FILE)", err)
	}
	return err
}

// Machine is how the overlay knows the node: name, ID, addresses, hub.
func (n *Node) Machine() Machine { return n.n.Machine() }

// AttachState says, in words, why the node has no hub now ("attaching to
// HUB: REASON, retrying"); "" while attached or without hubs.
func (n *Node) AttachState() string { return n.n.AttachState() }

// Attached is nil while the node is attached (or has no hubs), else a
// *NotAttachedError saying since when and why.
func (n *Node) Attached() error { return n.n.Attached() }

// GaveUp is closed once the hubs have refused the node for good (its
// certificate, role or name); Attached then says why.
func (n *Node) GaveUp() <-chan struct{} { return n.n.GaveUp() }

// Hold is for a long-running node: it returns a context that ends with
// ctx or when the hubs refuse the node for good, and a function that ends
// it and returns why it ended: the refusal (a *RefusedForGoodError), or
// nil.
func (n *Node) Hold(ctx context.Context) (context.Context, func() error) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-ctx.Done():
		case <-n.GaveUp():
			cancel()
		}
	}()
	return ctx, func() error {
		cancel()
		select {
		case <-n.GaveUp():
			return &RefusedForGoodError{Node: n.Name(), Err: whatToDo(n.Attached())}
		default:
			return nil
		}
	}
}

// RefusedForGoodError is why a held node ended: its hubs refused it for
// good.
type RefusedForGoodError struct {
	Node string // the node's name
	Err  error  // the refusal (a *NotAttachedError)
}

func (e *RefusedForGoodError) Error() string { return fmt.Sprintf("%s: %v", e.Node, e.Err) }
func (e *RefusedForGoodError) Unwrap() error { return e.Err }

// AttachChange is a change of a node's attachment: attached (to
// Machine.HubName), or not attached for a new reason (State says it).
type AttachChange struct {
	Attached bool
	Machine  Machine
	State    string
}

// attachPoll is how often WatchAttach looks.
const attachPoll = 500 * time.Millisecond

// WatchAttach calls f, until ctx is done, when the node attaches, loses
// its hub or fails to attach for a new reason (its session's own log, with
// Config.Logger, says so too).
func (n *Node) WatchAttach(ctx context.Context, f func(AttachChange)) {
	last := n.AttachState()
	var lastCause string
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(attachPoll):
		}
		st, cause := n.AttachState(), ""
		var na *vconn.NotAttachedError
		if err := n.Attached(); errors.As(err, &na) {
			cause = direct.ErrorClass(na.Cause)
		}
		switch {
		case st == "" && last != "":
			f(AttachChange{Attached: true, Machine: n.Machine()})
		case st != "" && (last == "" || cause != lastCause):
			f(AttachChange{Machine: n.Machine(), State: st})
		}
		last, lastCause = st, cause
	}
}

// AgentConfig configures a node agent: the node, its control socket and
// the services it offers other nodes. The zero value works: a node of the
// zero Config, the default control socket, no exit, no metrics endpoint.
type AgentConfig struct {
	Node Config
	// Control is the control socket (which only this uid and root may
	// use); empty: @gridlink-agent for root, else
	// $XDG_RUNTIME_DIR/gridlink/agent.sock or /tmp/gridlink-UID/agent.sock.
	Control string
	// AllowExit lets other nodes' SOCKS clients reach TCP hosts from
	// here: public addresses, and the private ones ExitAllow lists; never
	// this host's loopback, link-local, unspecified, multicast, broadcast
	// or own addresses (agent.Config.AllowExit). Every exit is logged
	// and counted (/metrics).
	AllowExit bool
	// ExitAllow lists the private addresses (RFC 1918, 100.64.0.0/10,
	// fc00::/7, the virtual prefixes) and ports exits may reach
	// (--exit-allow, ParseExitRule); none by default.
	ExitAllow []ExitRule
	// ExitPerMember bounds the exits one member may have open at once;
	// zero: DefaultExitPerMember (64).
	ExitPerMember int
	// VIP is the node's virtual IP network; the zero value: off.
	VIP VIPConfig
	// Metrics is the address of the agent's Prometheus endpoint, /metrics
	// (HOST:PORT; :PORT or PORT bind DefaultMetricsHost, loopback); empty:
	// none. It answers whoever reaches it: the node's byte and setup
	// counts by path kind and method, no peers' names or addresses.
	Metrics string
}

// ExitRule is one --exit-allow entry: private addresses exits may reach,
// and on which ports (agent.ExitRule).
type ExitRule = agent.ExitRule

// DefaultExitPerMember is how many exits one member may have open at
// once unless AgentConfig.ExitPerMember says otherwise.
const DefaultExitPerMember = agent.DefaultExitPerMember

// ParseExitRule reads --exit-allow's CIDR[:PORTS] (agent.ParseExitRule):
// e.g. 10.0.0.0/8, 192.168.1.5/32:22, fd00::/8:80,443,8000-9000.
func ParseExitRule(s string) (ExitRule, error) { return agent.ParseExitRule(s) }

// ErrBadExitRule matches ParseExitRule's errors.
var ErrBadExitRule = agent.ErrBadExitRule

// Agent is a running node agent: a node and the local control API other
// programs (and the gridlink commands) use through its client.
type Agent struct {
	a       *agent.Agent
	node    *Node
	vip     *vipNode           // nil without VIP.On
	host    *vipHost           // vip exec's devices (vipexec.go)
	metrics *metrics.Server    // nil without AgentConfig.Metrics
	stop    context.CancelFunc // ends the credential watch
}

// StartAgent starts a node (as Start does) and serves its control API.
func StartAgent(ctx context.Context, cfg AgentConfig) (*Agent, error) {
	vc, err := cfg.Node.node(ctx)
	if err != nil {
		return nil, err
	}
	// its addresses lead back into the overlay (--vip, or vip exec's devices)
	v := cfg.VIP.withDefaults()
	vc.Hide = []netip.Prefix{v.Prefix4, v.Prefix6}
	var ms *metrics.Server
	if cfg.Metrics != "" {
		if ms, err = metrics.Listen(cfg.Metrics); err != nil {
			return nil, err
		}
	}
	var creds *credWatch // over the files it read (credwatch.go)
	if cfg.Node.creds == nil && vc.Creds.Trust() != nil {
		var log *slog.Logger
		if cfg.Node.Logger != nil {
			log = cfg.Node.Logger.With("node", vc.Name)
		}
		creds = newCredWatch(cfg.Node.Credentials, vc.Creds, log)
	}
	ac := agent.Config{Control: cfg.Control, Node: vc, AllowExit: cfg.AllowExit, ExitAllow: cfg.ExitAllow, ExitPerMember: cfg.ExitPerMember}
	if creds != nil {
		ac.Credentials = creds.status
	}
	a, err := agent.Start(ctx, ac)
	var vipNet atomic.Pointer[vip.Network] // for /metrics, once the virtual network runs
	if err == nil && ms != nil {
		mn := nodeMetrics(a.Node())
		if cfg.AllowExit {
			mn.ExitCounters = a.ExitCounters
		}
		if cfg.VIP.On {
			mn.VirtualCounters = func() status.VIPCounters {
				if n := vipNet.Load(); n != nil {
					return vipCounters(n.Stats())
				}
				return status.VIPCounters{}
			}
		}
		if err = ms.Serve(mn); err != nil {
			a.Close()
		}
	}
	if err != nil {
		if ms != nil {
			ms.Close()
		}
		return nil, whatToDo(err)
	}
	ag := &Agent{a: a, node: &Node{n: a.Node(), creds: vc.Creds}, metrics: ms, stop: func() {}}
	if creds != nil {
		var wctx context.Context
		wctx, ag.stop = context.WithCancel(ctx)
		go creds.run(wctx)
	}
	if cfg.VIP.On {
		var log *slog.Logger
		if cfg.Node.Logger != nil {
			log = cfg.Node.Logger.With("node", a.Node().Name())
		}
		if ag.vip, err = startVIP(ctx, a.Node(), cfg.VIP, log); err != nil {
			ag.Close()
			return nil, err
		}
		vipNet.Store(ag.vip.net)
		a.SetStatus(func(st *status.Agent) { st.VIP = ag.vip.status() })
	}
	ag.host = newVIPHost(ag, cfg)
	a.SetVIPHost(ag.host)
	return ag, nil
}

// VirtualAddrs are the node's virtual addresses with their prefix length
// (IPv4 first, then IPv6) and its TUN device; none without VIP.On.
func (a *Agent) VirtualAddrs() (addrs []netip.Prefix, device string) {
	if a.vip == nil {
		return nil, ""
	}
	return []netip.Prefix{netip.PrefixFrom(a.vip.v4, a.vip.cfg.Prefix4.Bits()), netip.PrefixFrom(a.vip.v6, a.vip.cfg.Prefix6.Bits())}, a.vip.devName
}

// Node is the agent's node (closed by the agent's Close).
func (a *Agent) Node() *Node { return a.node }

// Control is the agent's control socket.
func (a *Agent) Control() string { return a.a.Control() }

// Close stops the agent and its node, its virtual network first (its
// device, addresses and routes taken off the host), and its metrics
// endpoint.
func (a *Agent) Close() error {
	a.stop()
	var err error
	if a.host != nil { // nil when the virtual network failed to start
		a.a.SetVIPHost(nil)
		err = a.host.close()
	}
	if a.vip != nil {
		a.a.SetStatus(nil)
		err = errors.Join(err, a.vip.close())
	}
	if a.metrics != nil {
		a.metrics.Close()
	}
	return errors.Join(err, a.a.Close())
}
