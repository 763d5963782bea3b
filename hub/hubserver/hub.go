// Package hubserver is the hub of gridlink's overlay of hubs
// (SmartSockets §3.3.1): the server that nodes attach to and that links to
// other hubs, routes between them and switches the circuits relayed
// through them. The node's side of an attachment, the trunk both ends run
// and the refusals both ends name are package hub's (like tailscale's derp
// and derp/derpserver); a node's program does not link this package in.
//
// A hub listens for hub trunks and node attachments and dials the hubs it
// is given and the ones it learns about. Every trunk starts with a TLS 1.3
// handshake (package pki) and then carries wire frames with its control
// frames sealed by keys from that handshake and its data frames, which the
// circuit's ends protect themselves, as they are (wire/seal.go): a hub
// relays data without decrypting and encrypting it again. Hubs route by
// distance vector with state numbers (DSDV): every hub sends its
// neighbours its table when their trunk comes up and then the entries
// that change (routing.go, wire/delta.go), with poison reverse, and a
// lost trunk (closed, or silent for three pings) makes its routes
// unreachable at once with an odd state number. Routed control messages travel along next hops; lookups find
// nodes by name or ID on every hub. Circuits are switched hop by hop with
// end-to-end flow control: a hub never blocks reading a trunk, queues what
// each circuit's window allows and resets a circuit that overruns it.
// Hubs that cannot reach each other splice a trunk through their NATs
// (splice.go). A trunk between two hubs carries several TCP connections
// when the path is long (lanes.go), each circuit on one of them, so that
// routed circuits are not confined to one TCP connection's rate.
//
// What strangers can make a hub hold before they prove who they are is
// bounded (accept.go): pending handshakes by a gate that sheds the oldest
// idle one (and, while full, turns away at once a newcomer that waited
// silent in the accept queue), the first message by a short deadline, and what the hub logs
// about them by a rate limit. A hub answers observation requests
// (observe.go) and discovery queries on the local network (discover.go).
// Hubs pass revocation lists to each other and cut off the trunks of
// members a new list revokes (crl.go).
//
// The package owns the hub's behaviour: accepting and dialling trunks,
// routing, circuit switching, lookups, routed messages, and what a trunk
// may be once its handshake admitted it: its role (refusal.go), a
// node's one attachment per identity at a hub (oneid.go) and its name,
// unique across the overlay (names.go); and the directory of
// virtual addresses, unique across the overlay alike (vipaddr.go,
// viplookup.go). It leaves out the
// node's session and circuit ends, the trunk and the handshake's sealing
// (package hub), the frame and message encodings (package wire), the
// identity handshake and certificate chains (pki), how a transport is
// reached, e.g. SSH tunnels (the caller's Dial, from package direct), and
// the choice between direct, reverse and routed connections (package
// vconn).
package hubserver

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/wire"
)

// DefaultListen is where a hub listens unless configured otherwise.
const DefaultListen = "0.0.0.0:7946"

// DefaultMaxLinks is Config.MaxLinks's default: a hub dials learned hubs
// until it has 6 trunks to other hubs, so overlays of up to 7 hubs (grid6
// among them) are a full mesh, and a hub of a larger one has about 8-9
// trunks (learned dials and accepted trunks add up), whose pings cost
// about 600 B/s idle, under issue 23's 1 KB/s with room for route
// changes (make scale: 11.1 trunks and 975-1,065 B/s a hub with a bound
// of 8; BENCHMARKS.md "Scale").
const DefaultMaxLinks = 6

// Config configures a hub. The zero value of every field but Creds works.
type Config struct {
	Name   string           // hub name, usually the site (e.g. "das3v"); default: the name a hub certificate certifies, else the ID's short form
	Creds  *pki.Credentials // required
	Listen string           // "host:port" for hub links and node attachments (default DefaultListen)
	Peers  []string         // other hubs' transport specs, dialled with Dial: "HOST:PORT" or an ssh:// spec
	// Dial reaches a transport spec; default plain TCP. The direct layer's
	// transport (TCP or SSH tunnel) is plugged in here.
	Dial     func(ctx context.Context, spec string) (net.Conn, error)
	Interval time.Duration                    // routing updates (changed entries; whole tables with older hubs) and node pings, default DefaultInterval
	Logf     func(format string, args ...any) // default log.Printf
	// NoSplice stops this hub from splicing links to hubs it cannot reach
	// and that cannot reach it (splice.go); by default it does.
	NoSplice bool
	// Listener, if set, is where the hub accepts instead of listening on
	// Listen (tests: an in-memory network, internal/memnet, so a hub runs
	// in a testing/synctest bubble); Serve closes it.
	Listener net.Listener
	// NoCounters turns the hub's counters off (Counters reports zeros):
	// for the benchmark that measures what counting and metrics cost.
	NoCounters bool
	// Lanes is how many TCP connections a trunk this hub dials to another
	// hub carries (lanes.go, wire/lane.go): 0, the default, one per 10 ms
	// of the trunk's round trip, up to 8; N > 1, N (at most MaxLanes);
	// 1, one, as before protocol version 3, and this hub then refuses the
	// further connections of trunks others dial. Spliced trunks, trunks
	// through ssh tunnels and trunks to older hubs keep one.
	Lanes int
	// MaxLinks bounds the trunks to other hubs at which this hub stops
	// dialling the hubs it learns of through gossip: 0, the default, is
	// DefaultMaxLinks; N > 0 dials learned hubs only while it has fewer
	// than N trunks, the nearest first (by their routes' latency); N < 0
	// dials every one (a full mesh, as SmartSockets does). Its configured
	// Peers are dialled anyway, and trunks other hubs dial are accepted. Routes through the others carry what a
	// missing trunk would. Idle, a hub sends each trunk a ping every
	// 700 ms (48 bytes sealed), so a bound keeps a hub's idle traffic
	// under 1 KB/s however large the overlay; a full mesh of H hubs costs
	// each H-1 of them, and when routes change each change goes to every
	// trunk.
	MaxLinks int
	// Congestion is the TCP congestion control of connections between
	// hubs: "" is "bbr", and a kernel without it (or that forbids it)
	// silently leaves its default; "default" leaves the kernel's default;
	// another name is tried like "bbr". Nodes' attachments keep the
	// kernel's default.
	Congestion string
	// VirtualPrefixes are the grid's virtual prefixes: a node's claim of
	// a virtual address outside all of them is refused (vipaddr.go), so
	// that no node takes an underlay address (and NAME.grid resolves to
	// it). Empty: wire.DefaultVirtual4 and wire.DefaultVirtual6, the
	// nodes' defaults; a grid whose nodes run with other prefixes
	// (--vip-prefix4/6) lists them here (gridlink hub --vip-prefix).
	VirtualPrefixes []netip.Prefix
}

// Hub is a hub server. Make one with New and run it with Serve.
//
// Its state, by concern. Locks: mu guards the trunks, the routes, the
// names and the splices together (registering a trunk, losing one and
// judging a name change several of them at once); the pending lookups
// have their own lock, never held with mu; each peer's circuits have
// theirs (peer.cmu, switch.go).
type Hub struct {
	// Fixed by New.
	cfg      Config
	id       identity.ID
	ln       net.Listener
	addrs    []netip.AddrPort
	interval time.Duration
	maxLinks int // trunks at which learned hubs are no longer dialled; 0: no bound
	logf     func(string, ...any)

	// Running (Serve): ctx is set under mu once Serve starts.
	serving atomic.Bool
	ctx     context.Context
	wg      sync.WaitGroup
	// vanish makes Serve end without goodbyes (no resets, no flush), as a
	// crash would; for tests.
	vanish atomic.Bool
	// version is the protocol version of the hub's hellos, 0 for
	// wire.Version: tests set an older one to play a hub of that version.
	version int

	// What it counts for metrics (counters.go): atomics, no lock.
	counts hubCounters

	// Strangers (accept.go).
	gate  direct.Gate   // bounds pending handshakes
	quiet *direct.Quiet // rate-limits what strangers make the hub log

	mu sync.Mutex

	// Trunks (peer.go), under mu.
	hubs  map[identity.ID]*peer // hub neighbours, one trunk each
	nodes map[identity.ID]*peer // attached nodes
	all   map[*peer]struct{}

	// Routing (routing.go, dial.go), under mu.
	routes map[identity.ID]*route
	state  uint64 // our own state number, even
	legacy bool   // a hub before wire.VersionDelta is known: the earlier rules (routing_send.go)
	// the node count in its own table entry, and since when (tick)
	nodesAd   int
	nodesAdAt time.Time
	// beat (routing_send.go): when it last ran, and until when silence is
	// not judged by beats after it ran late
	lastBeat, beatGrace time.Time
	dialing             map[identity.ID]bool // learned hubs being dialled
	trigger             chan struct{}        // asks the gossip loop for an update now (a channel: no lock)

	// Names (names.go), under mu.
	claims map[uint64]*claim // names being claimed for nodes being admitted, by query

	// Virtual addresses (vipaddr.go), under mu.
	vip vipDir

	// Spliced hub trunks (splice.go), under mu but spliceFailed.
	nat          hubNAT                // this hub's NAT
	splices      map[uint64]*hubSplice // rendezvous in progress, by token
	spliceFailed *spliceBackoff        // when splicing a trunk to a hub last failed, and how often (its own lock)

	// Queries this hub asks other hubs: lookups and name claims share the
	// numbers (queryID); lookups waiting for answers have their own lock
	// (control.go).
	queryID atomic.Uint64
	// reclaimed counts the names this hub told hubs that became
	// reachable (reclaim, names.go), for tests.
	reclaimed atomic.Int64
	lookups   struct {
		sync.Mutex
		pending map[uint64]*query
	}
}

// New checks cfg and binds the hub's listener, so Addr is known at once.
// Serve must run for the hub to work; it closes the listener when done.
func New(cfg Config) (*Hub, error) {
	if cfg.Creds == nil {
		return nil, errors.New("hub: no credentials")
	}
	h := &Hub{
		cfg:      cfg,
		counts:   hubCounters{off: cfg.NoCounters},
		id:       cfg.Creds.Key.ID(),
		interval: cfg.Interval,
		logf:     cfg.Logf,
		hubs:     map[identity.ID]*peer{},
		nodes:    map[identity.ID]*peer{},
		all:      map[*peer]struct{}{},
		routes:   map[identity.ID]*route{},
		dialing:  map[identity.ID]bool{},
		claims:   map[uint64]*claim{},
		trigger:  make(chan struct{}, 1),

		splices:      map[uint64]*hubSplice{},
		spliceFailed: newSpliceBackoff(),
	}
	if h.cfg.Name == "" {
		h.cfg.Name = cfg.Creds.DefaultName(h.id.Short())
	}
	if err := identity.CheckName(h.cfg.Name); err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	if len(h.cfg.VirtualPrefixes) == 0 {
		h.cfg.VirtualPrefixes = []netip.Prefix{wire.DefaultVirtual4, wire.DefaultVirtual6}
	}
	for _, p := range h.cfg.VirtualPrefixes {
		if !p.IsValid() || p.Masked() != p || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			return nil, fmt.Errorf("hub: virtual prefix %s: want a prefix without host bits, such as %s or %s", p, wire.DefaultVirtual4, wire.DefaultVirtual6)
		}
	}
	switch {
	case cfg.MaxLinks == 0:
		h.maxLinks = DefaultMaxLinks
	case cfg.MaxLinks > 0:
		h.maxLinks = cfg.MaxLinks
	}
	if h.interval <= 0 {
		h.interval = DefaultInterval
	}
	if h.cfg.Dial == nil {
		h.cfg.Dial = hub.DialTCP
	}
	if h.logf == nil {
		h.logf = log.Printf
	}
	if h.cfg.Listen == "" {
		h.cfg.Listen = DefaultListen
	}
	h.lookups.pending = map[uint64]*query{}
	h.quiet = h.newQuiet()
	h.gate.Spoke = spoke
	// State numbers start from the clock, so a restarted hub's states are
	// newer than any of its previous life.
	h.state = uint64(time.Now().UnixMilli()) * 2
	ln := h.cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", h.cfg.Listen); err != nil {
			return nil, fmt.Errorf("hub %s: %w", h.cfg.Name, err)
		}
	}
	tuneListener(ln, listenBacklog, direct.FirstBytesTimeout) // TCP listeners only
	h.ln = ln
	h.addrs = listenAddrs(ln.Addr())
	return h, nil
}

// listenAddrs lists where others can reach a listener: its address, or
// every interface address if it listens on all of them.
func listenAddrs(a net.Addr) []netip.AddrPort {
	ap := hub.AddrPort(a)
	if !ap.Addr().IsUnspecified() {
		return []netip.AddrPort{ap}
	}
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out, loop []netip.AddrPort
	for _, ia := range ifaddrs {
		pfx, err := netip.ParsePrefix(ia.String())
		if err != nil {
			continue
		}
		ip := pfx.Addr().Unmap()
		switch {
		case ip.IsLoopback():
			loop = append(loop, netip.AddrPortFrom(ip, ap.Port()))
		case ip.IsLinkLocalUnicast(), ip.Is6() && ap.Addr().Is4():
		default:
			out = append(out, netip.AddrPortFrom(ip, ap.Port()))
		}
	}
	if len(out) == 0 {
		out = loop
	}
	if len(out) > 16 {
		out = out[:16]
	}
	return out
}

// helloVersion is the protocol version the hub's hellos carry.
func (h *Hub) helloVersion() int {
	if h.version != 0 {
		return h.version
	}
	return wire.Version
}

// ID is the hub's identity.
func (h *Hub) ID() identity.ID { return h.id }

// Name is the hub's name.
func (h *Hub) Name() string { return h.cfg.Name }

// Addr is the listener's address.
func (h *Hub) Addr() net.Addr { return h.ln.Addr() }

// machine is the hub's own machine identifier.
func (h *Hub) machine() identity.Machine {
	return identity.Machine{ID: h.id, Name: h.cfg.Name, Addrs: h.addrs}
}

// Serve runs the hub until ctx is done: accepts links and attachments,
// dials its peers (re-dialling those it cannot reach, with backoff capped
// at about 5s, and also hubs learned through gossip), gossips and pings.
// It returns nil once ctx is done and everything is closed.
func (h *Hub) Serve(ctx context.Context) error {
	if !h.serving.CompareAndSwap(false, true) {
		return errors.New("hub: Serve called twice")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h.mu.Lock()
	h.ctx = ctx
	h.mu.Unlock()
	acceptErr := make(chan error, 1)
	h.wg.Add(3)
	go func() { defer h.wg.Done(); acceptErr <- h.acceptLoops(ctx) }()
	go func() { defer h.wg.Done(); h.gossipLoop(ctx) }()
	go func() { defer h.wg.Done(); h.watchRevocations(ctx) }()
	for _, spec := range h.cfg.Peers {
		h.wg.Add(1)
		go func() { defer h.wg.Done(); h.dialPeer(ctx, spec) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-acceptErr:
		err = fmt.Errorf("hub %s: accept: %w", h.cfg.Name, err)
		cancel()
	}
	h.ln.Close()
	h.mu.Lock()
	peers := make([]*peer, 0, len(h.all))
	for p := range h.all {
		peers = append(peers, p)
	}
	h.mu.Unlock()
	if h.vanish.Load() {
		// silence every link before closing any: a reader that sees its
		// link go must not get a reset out through another.
		for _, p := range peers {
			p.t.Mute()
			for _, l := range p.extraLanes() {
				l.t.Mute()
			}
		}
		for _, p := range peers {
			p.t.Close(errors.New("hub vanished"))
		}
		h.wg.Wait()
		return err
	}
	// Circuits learn why before the links go.
	bye := fmt.Sprintf("hub %s is shutting down", h.cfg.Name)
	for _, p := range peers {
		p.cmu.Lock()
		refs := p.circuits
		p.circuits = nil
		p.cmu.Unlock()
		for id, ref := range refs {
			ref.c.ends[ref.side].ln.t.Send(wire.TReset, wire.FlagHub, id, []byte(bye))
		}
	}
	for _, p := range peers {
		for _, l := range p.extraLanes() {
			l.t.CloseAfterFlush(500*time.Millisecond, errors.New(bye))
		}
		p.t.CloseAfterFlush(500*time.Millisecond, errors.New(bye))
	}
	h.wg.Wait()
	return err
}

// serveConn runs an accepted connection: handshake, hello, then the link;
// or answers an observation request (observe.go). It holds pend (nil for
// a connection no gate holds) until the peer's hello is read.
func (h *Hub) serveConn(ctx context.Context, raw net.Conn, pend *direct.Pending) {
	defer pend.Done()
	stop := context.AfterFunc(ctx, func() { _ = raw.SetReadDeadline(time.Now()) }) // the hub's end aborts it
	replay := h.sniff(raw, pend)
	stop()
	if replay == nil {
		return // an observation request, answered
	}
	c := raw // the link writes here (writev); it reads through replay
	hctx, cancel := context.WithTimeout(ctx, hub.HandshakeTimeout)
	sec, err := hub.Secure(hctx, h.cfg.Creds, replay, false, identity.ID{}, "")
	cancel()
	if err != nil {
		h.logHandshake(c, pend, err)
		if !errors.Is(err, pki.ErrDenied) { // a refusal closes once its reason is out
			c.Close()
		}
		return
	}
	id, sealer, r := sec.Peer, sec.Sealer, sec.Reader
	_ = c.SetDeadline(time.Now().Add(hub.HandshakeTimeout))
	if err := sec.Verdict(); err != nil {
		h.logf("hub %s: connection from %s (%s): %v", h.cfg.Name, c.RemoteAddr(), id.Short(), err)
		c.Close()
		return
	}
	hello, err := hub.ReadHello(r, id)
	if err != nil {
		h.logf("hub %s: connection from %s (%s): %v", h.cfg.Name, c.RemoteAddr(), id.Short(), err)
		c.Close()
		return
	}
	if err := admitRole(sec.TLS.Peer, hello.Role); err != nil {
		h.refuse(c, sealer, id.Short(), roleRefusal(err))
		return
	}
	if e := nameRefusal(hello); e != nil {
		h.refuse(c, sealer, id.Short(), e)
		return
	}
	if hello.Lane != nil {
		h.acceptLane(c, sec, hello, pend) // lanes.go
		return
	}
	if hello.Role == "hub" {
		h.tuneTrunk(c)
	}
	_ = c.SetDeadline(time.Time{})
	pend.Done()
	p := h.newPeer(c, sealer, hello, false, false)
	p.who = sec.TLS.Peer
	if p.laneSecret, err = sec.LaneSecret(); err != nil {
		h.logf("hub %s: connection from %s (%s): %v", h.cfg.Name, c.RemoteAddr(), id.Short(), err)
		c.Close()
		return
	}
	if e := h.admitIdentity(p); e != nil { // oneid.go
		h.refuse(c, sealer, id.Short(), e)
		return
	}
	if e := h.admitName(p, sec.TLS.Peer); e != nil {
		h.refuse(c, sealer, id.Short(), e)
		return
	}
	// Registered before our hello goes out: once a node has our hello, the
	// hub routes to it.
	claim := p.claim // register hands it over and drops it
	if err := h.register(p); err != nil {
		var re *hub.RefusedError
		if errors.As(err, &re) { // its name, lost to a claim at the last moment
			h.refuse(c, sealer, id.Short(), re)
			return
		}
		h.logf("hub %s: %s: %v", h.cfg.Name, p.t.Desc(), err)
		c.Close()
		return
	}
	p.t.SendControl(&wire.Message{Kind: wire.KHello, Hello: &wire.Hello{Role: "hub", Machine: h.machine(), Version: h.helloVersion(), Observed: p.t.Remote()}})
	h.claimFollowUp(p, claim) // names.go
	// The trunk is read by a goroutine of its own: this one's stack grew
	// in the handshake and would be kept, 8 KiB (a fresh one shrinks to
	// 4 KiB while it waits; issue 23's memory per idle node).
	h.wg.Add(1)
	go func() { defer h.wg.Done(); h.run(p, r) }()
}

// Nodes lists the attached nodes, with their hub fields filled.
func (h *Hub) Nodes() []identity.Machine {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]identity.Machine, 0, len(h.nodes))
	for _, p := range h.nodes {
		out = append(out, p.machine)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// LinkInfo describes one of the hub's links.
type LinkInfo struct {
	Peer     identity.ID
	Name     string
	Role     string // "hub" or "node"
	Remote   netip.AddrPort
	Dialed   bool // this hub dialled the link
	RTT      time.Duration
	Circuits int
	Queued   int // bytes waiting to be written, on all its connections
	// Connections is how many TCP connections the trunk carries (lanes.go).
	Connections int
	// Congestion is the TCP congestion control of its first connection
	// ("" where unknown: not a TCP socket, not Linux).
	Congestion string
}

// Links lists the hub's neighbours, hubs first.
func (h *Hub) Links() []LinkInfo {
	h.mu.Lock()
	peers := make([]*peer, 0, len(h.all))
	for p := range h.all {
		peers = append(peers, p)
	}
	h.mu.Unlock()
	out := make([]LinkInfo, 0, len(peers))
	for _, p := range peers {
		p.cmu.Lock()
		n, lanes := len(p.circuits), append([]*lane(nil), p.lanes...)
		p.cmu.Unlock()
		role := "node"
		if p.isHub {
			role = "hub"
		}
		queued := 0
		for _, l := range lanes {
			queued += l.t.Queued()
		}
		out = append(out, LinkInfo{Peer: p.id, Name: p.name, Role: role, Remote: p.t.Remote(), Dialed: p.dialed,
			RTT: p.t.RTT(), Circuits: n, Queued: queued, Connections: len(lanes), Congestion: hub.Congestion(p.t.Conn())})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Role != out[j].Role {
			return out[i].Role == "hub"
		}
		return out[i].Name < out[j].Name
	})
	return out
}
