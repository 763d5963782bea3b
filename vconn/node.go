package vconn

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/nat"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/wire"
)

// Config configures a node. The zero value works: a fresh key, the host
// name as name, no hub (direct connections only), any listening port.
type Config struct {
	Name string       // unique name in the grid; default: the name a node certificate certifies, else the host name
	Key  identity.Key // default: a fresh key
	// Hubs are transport specs of the hubs to attach to, in order of
	// preference ("HOST:PORT" or "ssh://...": through an sshd, configured
	// by SSH, or the user's ~/.ssh files when SSH is nil). None: direct
	// only. The node attaches in the background and keeps trying (Start
	// waits for the first round; Attached, WaitAttached).
	Hubs []string
	// NoReturn keeps the node on the hub it re-attached to after losing
	// one. Zero: it goes back to an earlier one of Hubs (the first is its
	// home) once that admits it again, probed 2 s, doubling to 30 s
	// (hub.SessionConfig.NoReturn).
	NoReturn bool
	Ports    direct.PortRange // confine the direct listener; zero: any port
	// ListenAddr binds the direct listener to one address (it is then the
	// only one the node advertises); default: all interfaces.
	ListenAddr string
	Preferred  []netip.Prefix    // networks to try first
	SSH        *direct.SSHConfig // ssh:// hubs; with it, direct connections also try the targets' sshds
	// HeadStart is how much earlier a more direct method starts in a race
	// (default 25ms): direct at 0, reverse at HeadStart, routed at 2x.
	HeadStart time.Duration
	// Methods enabled (default all). Tests and `gridlink doctor` restrict it.
	Methods []Method
	// NoCache disables the per-site method cache.
	NoCache bool
	// SpareTTL is how long the node keeps a spare direct connection to a
	// target it reached directly, for the next setup (spare.go): default
	// 20s, at most 50s; negative: no spares.
	SpareTTL time.Duration
	// PortMap asks the NAT gateway for an inbound mapping of the direct
	// listener's port (UPnP IGD or NAT-PMP) and advertises its external
	// endpoint (portmap.go). Off by default: those protocols probe the
	// local network (SSDP multicast, requests to the gateway), which no
	// one should get by surprise; `gridlink node --portmap` turns it on.
	PortMap bool
	// Creds are what the node shows and whom it admits: pki.Certified
	// credentials for a grid with a CA (Key is then Creds.Key); default:
	// a self-signed certificate for Key, an open grid admitting any key.
	Creds *pki.Credentials
	// Hide are networks the node neither advertises nor dials (hide.go):
	// a virtual network carried over the overlay. None by default.
	Hide []netip.Prefix
	Logf func(format string, args ...any)
	// NoCounters turns the node's counters off (Counters reports zeros):
	// for the benchmark that measures what counting and metrics cost.
	NoCounters bool
}

// Node is one process's presence in the overlay: its identity, its direct
// listener, its hub session and its virtual listeners.
type Node struct {
	cfg     Config
	creds   *pki.Credentials
	dialer  *direct.Dialer
	direct  *direct.Listener
	session *hub.Session // nil without hubs

	// noSplice: per target hub, when splicing there last failed (splice.go;
	// its own lock).
	noSplice *nat.Backoff[identity.ID]
	// spliceEarlyMin: early splice answers only over hub links of this
	// round trip or more (spliceEarlyMin; tests on loopback lower it
	// before the node dials)
	spliceEarlyMin time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// state by concern, each under its own lock (state.go)
	ports  ports
	conns  openConns
	memo   memory
	rdv    rendezvous
	spares spares
	self   self
	pm     portMapState // Config.PortMap (portmap.go)
	counts counters     // for metrics (counters.go): atomics, no lock
	// testPredict, set by tests only (before use), rewrites this node's
	// splice predictions (natstate.go).
	testPredict func([]netip.AddrPort) []netip.AddrPort
}

// Start brings a node up: key, direct listener, hub session. It waits for
// the session's first round of attempts (firstAttach): a refusal fails
// Start, an unreachable hub does not.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = identity.ShortName(host) // a name has no dot (identity.CheckName)
		if cfg.Creds != nil {
			cfg.Name = cfg.Creds.DefaultName(cfg.Name) // a node certificate binds its name
		}
	}
	if cfg.Name != "" {
		if err := identity.CheckName(cfg.Name); err != nil {
			return nil, fmt.Errorf("vconn: %w", err) // before anything starts; every hub would refuse it
		}
	}
	if cfg.Creds != nil {
		cfg.Key = cfg.Creds.Key
	}
	if cfg.Key.IsZero() {
		k, err := identity.NewKey()
		if err != nil {
			return nil, err
		}
		cfg.Key = k
	}
	if cfg.HeadStart == 0 {
		cfg.HeadStart = 25 * time.Millisecond
	}
	if len(cfg.Methods) == 0 {
		cfg.Methods = []Method{Direct, Reverse, Splice, Routed}
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	creds := cfg.Creds
	if creds == nil {
		var err error
		if creds, err = pki.NewCredentials(cfg.Key); err != nil {
			return nil, err
		}
	}
	n := &Node{
		cfg:            cfg,
		creds:          creds,
		ports:          ports{listeners: map[uint16]*Listener{}},
		conns:          openConns{set: map[*Conn]struct{}{}},
		memo:           memory{methods: map[identity.ID]Method{}, names: map[string]nameEntry{}},
		rdv:            rendezvous{reverses: map[uint64]*pendingReverse{}, callbacks: map[uint64]uint16{}, splices: map[uint64]*pendingSplice{}},
		spares:         spares{byTarget: map[identity.ID][]*spare{}, flights: map[spareKey]*spareFlight{}, held: map[*direct.Conn]bool{}},
		noSplice:       &nat.Backoff[identity.ID]{Min: spliceFailedFor},
		spliceEarlyMin: spliceEarlyMin,
	}
	n.dialer = &direct.Dialer{Creds: creds, Preferred: cfg.Preferred, SSH: cfg.SSH, Local: n.localPrefixes,
		Admit: func(p pki.Peer, req string) error { return n.admitDirect(p, req, true) }}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	var err error
	n.direct, err = direct.Listen(ctx, direct.ListenConfig{Creds: creds, Addr: cfg.ListenAddr, Ports: cfg.Ports, Check: n.checkDirect, Local: n.localPrefixes,
		Admit:  func(p pki.Peer, req string) error { return n.admitDirect(p, req, false) },
		Logger: slog.New(logfHandler{logf: cfg.Logf})})
	if err != nil {
		return nil, fmt.Errorf("vconn: node %s: direct listener: %w", cfg.Name, err)
	}
	n.wg.Add(1)
	go n.acceptDirect()
	n.self.nonRouted = !HasDefaultRoute()
	if len(cfg.Hubs) > 0 {
		n.session, err = hub.Connect(hub.SessionConfig{
			Creds:    creds,
			Machine:  n.localMachine(),
			Hubs:     cfg.Hubs,
			NoReturn: cfg.NoReturn,
			Dial:     hubTransport(creds, cfg),
			Logf:     cfg.Logf,
		})
		if err == nil {
			err = n.firstAttach(ctx)
		}
		if err != nil {
			if n.session != nil {
				n.session.Close()
			}
			n.direct.Close()
			return nil, fmt.Errorf("vconn: node %s: attach to a hub (%v): %w", cfg.Name, cfg.Hubs, err)
		}
		n.wg.Add(3)
		go n.serveMessages()
		go n.serveCircuits()
		go n.watchNAT()
	}
	if t := creds.Trust(); t != nil {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			t.Watch(n.ctx, 0, cfg.Logf)
		}()
		n.wg.Add(1)
		go n.watchRevocations(t)
	}
	n.startPortMap()
	return n, nil
}

// localMachine is this node's identifier without hub information: its
// listener's addresses and a port mapping's.
func (n *Node) localMachine() identity.Machine {
	m := n.withMapped(n.direct.Machine(n.cfg.Key.ID(), n.cfg.Name))
	n.self.mu.Lock()
	m.NAT, m.NATSequential, m.NonRouted = n.self.natExternal, n.self.natSequential, n.self.nonRouted
	n.self.mu.Unlock()
	return m
}

// Machine is this node's machine identifier, with its hub.
func (n *Node) Machine() identity.Machine {
	m := n.localMachine()
	if n.session != nil {
		h := n.session.Hub()
		m.Hub, m.HubName = h.ID, h.Name
	}
	return m
}

// ID is the node's ID.
func (n *Node) ID() identity.ID { return n.cfg.Key.ID() }

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Session is the node's hub session, or nil.
func (n *Node) Session() *hub.Session { return n.session }

// Close shuts the node down: listeners, connections, hub session, port
// mapping (deleted at the gateway before Close returns).
func (n *Node) Close() error {
	n.cancel()
	n.direct.Close()
	if n.session != nil {
		n.session.Close()
	}
	n.ports.mu.Lock()
	for _, l := range n.ports.listeners {
		l.closeLocked()
	}
	n.ports.mu.Unlock()
	n.conns.mu.Lock()
	for c := range n.conns.set {
		c.Conn.Close()
	}
	n.conns.mu.Unlock()
	n.spares.mu.Lock()
	n.dropSparesLocked()
	for c := range n.spares.held {
		c.Close()
	}
	n.spares.mu.Unlock()
	n.wg.Wait()
	return nil
}

// Listen opens a virtual listener on port (0: a free port from 49152 up,
// chosen at random: freePortLocked).
func (n *Node) Listen(port uint16) (*Listener, error) { return n.ListenAllow(port, nil) }

// ListenAllow opens a virtual listener on port that admits only the
// dialers allow accepts (nil: every member of the grid; see pki.Members).
// Its refusals reach the dialler with the error's text.
func (n *Node) ListenAllow(port uint16, allow func(pki.Peer) error) (*Listener, error) {
	n.ports.mu.Lock()
	defer n.ports.mu.Unlock()
	if port == wire.SparePort {
		return nil, fmt.Errorf("vconn: port %d is reserved: it names a spare connection's setup", port)
	}
	if port == 0 {
		p, err := n.freePortLocked()
		if err != nil {
			return nil, err
		}
		port = p
	}
	if n.ports.listeners[port] != nil {
		return nil, fmt.Errorf("vconn: port %d is already in use on node %s", port, n.cfg.Name)
	}
	l := &Listener{node: n, port: port, allow: allow, queue: make(chan *Conn, 64), done: make(chan struct{})}
	n.ports.listeners[port] = l
	return l, nil
}

// Free ports are taken from firstFreePort up to wire.SparePort (not
// included).
const firstFreePort = 49152

// freePortLocked is a free port chosen at random (crypto/rand), so that
// no one can tell which a listener will get (a SOCKS BIND's, which a
// racing member would dial first): a random one again while it is taken,
// then the next free one after a random port. n.ports.mu is held.
func (n *Node) freePortLocked() (uint16, error) {
	const span = uint32(wire.SparePort - firstFreePort)
	random := func() uint16 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		return firstFreePort + uint16(binary.BigEndian.Uint32(b[:])%span)
	}
	for range 64 {
		if p := random(); n.ports.listeners[p] == nil {
			return p, nil
		}
	}
	start := uint32(random() - firstFreePort)
	for i := range span {
		if p := firstFreePort + uint16((start+i)%span); n.ports.listeners[p] == nil {
			return p, nil
		}
	}
	return 0, fmt.Errorf("vconn: no free virtual port on node %s (%d-%d are all taken)", n.cfg.Name, firstFreePort, wire.SparePort-1)
}

func (n *Node) listener(port uint16) *Listener {
	n.ports.mu.Lock()
	defer n.ports.mu.Unlock()
	return n.ports.listeners[port]
}

func (n *Node) refusal(port uint16) string {
	return fmt.Sprintf("connection refused: no listener on port %d at %s", port, n.cfg.Name)
}

// Listener is a virtual listener: a net.Listener for a port of this node.
type Listener struct {
	node  *Node
	port  uint16
	allow func(pki.Peer) error
	queue chan *Conn
	done  chan struct{}
	once  sync.Once
}

// Accept waits for the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.queue:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops the listener.
func (l *Listener) Close() error {
	l.node.ports.mu.Lock()
	defer l.node.ports.mu.Unlock()
	l.closeLocked()
	return nil
}

func (l *Listener) closeLocked() {
	l.once.Do(func() {
		if l.node.ports.listeners[l.port] == l {
			delete(l.node.ports.listeners, l.port)
		}
		close(l.done)
	})
}

// Addr is the listener's virtual address.
func (l *Listener) Addr() net.Addr { return Addr{Node: l.node.Machine(), Port: l.port} }

// Port is the listener's port.
func (l *Listener) Port() uint16 { return l.port }

// deliver waits for the dialler's commit byte on an accepted connection,
// then queues it for Accept.
func (n *Node) deliver(c net.Conn, method Method, peer identity.Machine, port uint16) {
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil || b[0] != commitByte {
		c.Close() // a loser of the dialler's race, or a broken dial
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	l := n.listener(port)
	if l == nil {
		c.Close()
		return
	}
	vc := n.track(&Conn{Conn: c, method: method, local: Addr{Node: n.Machine(), Port: port}, remote: Addr{Node: peer}})
	select {
	case l.queue <- vc:
	case <-l.done:
		vc.Close()
	case <-time.After(10 * time.Second):
		n.cfg.Logf("vconn: listener on port %d is not accepting: dropped a %s connection from %s", port, method, peer)
		vc.Close()
	}
}

func (n *Node) track(c *Conn) *Conn {
	if !n.cfg.NoCounters {
		c.bytes = n.counts.path(c.method)
	}
	if pc := c.session(); pc != nil {
		c.peer = pc.Peer
	}
	// onDone is set before c joins the set: closeRevoked may close (and
	// so call onDone) anything it finds there
	c.onDone = func() {
		n.conns.mu.Lock()
		delete(n.conns.set, c)
		n.conns.mu.Unlock()
	}
	n.conns.mu.Lock()
	n.conns.set[c] = struct{}{}
	n.conns.mu.Unlock()
	return c
}

// ConnInfo describes an open virtual connection, for status displays.
type ConnInfo struct {
	Local, Remote string
	Method        Method
	// SentBytes and ReceivedBytes are the payload its programs wrote and
	// read so far (TLS overhead not included), for throughput displays.
	SentBytes, ReceivedBytes uint64
}

// Conns lists the open virtual connections.
func (n *Node) Conns() []ConnInfo {
	n.conns.mu.Lock()
	defer n.conns.mu.Unlock()
	var out []ConnInfo
	for c := range n.conns.set {
		out = append(out, ConnInfo{Local: c.local.String(), Remote: c.remote.String(), Method: c.method,
			SentBytes: c.own.sent.Load(), ReceivedBytes: c.own.received.Load()})
	}
	return out
}

// CachedMethods returns the per-site method cache: hub name or ID -> method.
func (n *Node) CachedMethods() map[identity.ID]Method {
	n.memo.mu.Lock()
	defer n.memo.mu.Unlock()
	out := map[identity.ID]Method{}
	for k, v := range n.memo.methods {
		out[k] = v
	}
	return out
}

// ForgetCache empties the method, name and address caches, forgets where
// splicing failed and closes the spare connections: the next dial starts
// from nothing (but what this host knows of its own NAT).
func (n *Node) ForgetCache() {
	n.memo.mu.Lock()
	n.memo.methods = map[identity.ID]Method{}
	n.memo.names = map[string]nameEntry{}
	n.memo.mu.Unlock()
	n.noSplice.Forget()
	n.spares.mu.Lock()
	n.dropSparesLocked()
	n.spares.mu.Unlock()
	n.dialer.Forget()
}
