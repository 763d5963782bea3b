package vip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/tun"
)

// Resolver finds the node that holds a virtual address (the directory:
// the hubs, later; a map in tests).
type Resolver interface {
	// Resolve returns the identity of the node holding addr. An error
	// matching ErrNoNode says no node does; others are failures to find
	// out.
	Resolve(ctx context.Context, addr netip.Addr) (identity.ID, error)
}

// ErrNoNode is the Resolver's answer for an address no node holds.
var ErrNoNode = errors.New("vip: no node holds the address")

// Dialer opens the packet connection to a peer: a net.Conn whose far end
// hands it to its Network's Accept with this node's identity. The node
// agent gives vconn connections to the vip service, authenticated end to
// end; tests give net.Pipe.
type Dialer interface {
	DialPeer(ctx context.Context, id identity.ID) (net.Conn, error)
}

// ErrClosed is the error of Accept on a closed Network.
var ErrClosed = errors.New("vip: network closed")

// Defaults and bounds of a Network.
const (
	DefaultQueueLen = 1024             // packets queued per peer
	maxPending      = 256              // packets held per destination while it is looked up
	maxPendingAll   = 1024             // and for all destinations
	maxRoutes       = 4096             // destinations remembered
	resolveTimeout  = 10 * time.Second // one lookup
	dialTimeout     = 20 * time.Second // one dial
	dialRetry       = time.Second      // after a failed dial, packets to the peer are dropped this long
	noRouteHold     = 5 * time.Second  // an address no node holds is not looked up again this long
	maxSources      = 16               // source addresses remembered per connection
	minReadBuffer   = 9000             // bytes of a buffer the device is read into, at least
)

// Config is what a Network is made of.
type Config struct {
	Device   tun.Device   // the TUN device; the Network owns it from New on (Close closes it)
	ID       identity.ID  // this node's identity
	Addrs    []netip.Addr // this node's virtual addresses (an IPv4 and an IPv6 one, usually)
	Resolver Resolver
	Dialer   Dialer
	// MTU is the tunnel MTU: packets from the device larger than this
	// get an ICMP error instead of a trip. Zero: the device's MTU.
	MTU int
	// QueueLen is the most packets queued for one peer; more are dropped.
	// Zero: DefaultQueueLen.
	QueueLen int
	// Logger receives what peers and the device did wrong (rate-limited
	// by reason); nil: slog.Default().
	Logger *slog.Logger
	// Rules are this node's access rules, applied to every packet a peer
	// sends it; zero: every member may reach everything (see Rules).
	Rules Rules
	// Carriers is the most connections to one peer (carrier.go: while
	// packets of several flows go to a peer on a shortcut, more
	// connections to its CarrierPort, a flow on each, as many as both
	// ends agree on); zero: DefaultCarriers; 1: one connection per peer
	// (a peer's carriers are refused). At most 255.
	Carriers int
}

// Network is one node's packet path of the virtual IP network: it reads
// packets from the device and carries them to the peers holding their
// destinations, and writes the packets peers send it to the device. See
// the package documentation.
type Network struct {
	cfg      Config
	dev      tun.Device
	log      *slog.Logger
	quiet    *direct.Quiet
	mtu      atomic.Int64 // tunnel MTU: Config.MTU, or the device's
	devMTU   atomic.Int64 // the device's, followed through its EventMTUUpdate (mtu.go)
	queueLen int
	// maxCarriers is Config.Carriers or its default.
	maxCarriers int
	ctx         context.Context
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	drops       [numReasons]atomic.Uint64
	devMu       sync.Mutex // serializes writes to the device
	rules       atomic.Pointer[Rules]
	flows       conntrack // this node's flows, when there are rules (conntrack.go)

	mu       sync.Mutex
	closed   bool
	routes   map[netip.Addr]*route
	pending  int // packets in all routes' pending
	peers    map[identity.ID]*peer
	counters map[identity.ID]*counters
	conns    map[net.Conn]struct{}
}

// New starts the packet path on cfg.Device.
func New(cfg Config) (*Network, error) {
	if cfg.Device == nil || cfg.Resolver == nil || cfg.Dialer == nil {
		return nil, fmt.Errorf("vip: config needs a Device, a Resolver and a Dialer")
	}
	if len(cfg.Addrs) == 0 {
		return nil, fmt.Errorf("vip: config needs this node's addresses")
	}
	devMTU, err := cfg.Device.MTU()
	if err != nil {
		return nil, fmt.Errorf("vip: device MTU: %w", err)
	}
	n := &Network{
		cfg:      cfg,
		dev:      cfg.Device,
		log:      cfg.Logger,
		queueLen: cfg.QueueLen,
		routes:   map[netip.Addr]*route{},
		peers:    map[identity.ID]*peer{},
		counters: map[identity.ID]*counters{},
		conns:    map[net.Conn]struct{}{},
	}
	n.rules.Store(&cfg.Rules)
	if n.log == nil {
		n.log = slog.Default()
	}
	n.setMTU(devMTU)
	if n.queueLen <= 0 {
		n.queueLen = DefaultQueueLen
	}
	switch n.maxCarriers = cfg.Carriers; {
	case n.maxCarriers <= 0:
		n.maxCarriers = DefaultCarriers
	case n.maxCarriers > maxCarriers:
		n.maxCarriers = maxCarriers
	}
	n.quiet = direct.NewQuiet(0, 0, func(reason direct.QuietKind, more int, since time.Time) {
		n.log.Info("vip: more drops not logged", "reason", reason, "count", more, "since", since.Format(time.TimeOnly))
	})
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg.Add(2)
	go n.readDevice()
	go n.watchDevice()
	return n, nil
}

// SetRules replaces the access rules (Config.Rules) for the packets
// received from now on. Flows this node opened while it had no rules are
// not tracked yet: their answers pass again once it sends on them.
func (n *Network) SetRules(r Rules) { n.rules.Store(&r) }

// MTU is the tunnel MTU (it follows the device's when Config.MTU is
// zero).
func (n *Network) MTU() int { return int(n.mtu.Load()) }

// Close stops the path: it closes the device and every connection and
// waits for the Network's goroutines.
func (n *Network) Close() error {
	n.mu.Lock()
	n.closed = true
	n.cancel()
	for c := range n.conns {
		c.Close()
	}
	for _, p := range n.peers {
		for _, l := range p.links {
			l.stopRetire()
		}
	}
	n.mu.Unlock()
	err := n.dev.Close()
	n.wg.Wait()
	return err
}

// Accept serves a connection the peer id opened (its identity
// authenticated by whoever accepted it): the Network reads the peer's
// packets from it and sends on it when it is the best connection to the
// peer (see ShortcutDialer: a better one takes over the sending, the one
// it replaces is closed after a grace period). The Network owns conn from
// now on.
func (n *Network) Accept(conn net.Conn, id identity.ID) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		conn.Close()
		return ErrClosed
	}
	p := n.peers[id]
	if p == nil || p.down {
		p = n.newPeerLocked(id)
	}
	n.addLinkLocked(p, conn, id)
	return nil
}

// drop counts a dropped packet, and logs it (rate-limited by reason) when
// what is not empty.
func (n *Network) drop(r reason, what string, args ...any) {
	n.drops[r].Add(1)
	if what != "" && n.quiet.Allow(direct.QuietKind(r.String())) {
		n.log.Warn("vip: dropped "+what, append([]any{"reason", r.String()}, args...)...)
	}
}

// ours reports whether a is one of this node's addresses.
func (n *Network) ours(a netip.Addr) bool {
	for _, o := range n.cfg.Addrs {
		if o == a {
			return true
		}
	}
	return false
}

// writeDevice writes pkts (each with tun.Offset bytes of headroom) to the
// device; a packet it refuses is counted.
func (n *Network) writeDevice(pkts [][]byte) {
	if len(pkts) == 0 {
		return
	}
	n.devMu.Lock()
	_, err := n.dev.Write(pkts, tun.Offset)
	n.devMu.Unlock()
	if err != nil && !errors.Is(err, os.ErrClosed) {
		n.drop(dropDeviceWrite, "packets the device refused", "err", err)
	}
}

// writeICMP writes an ICMP error (nil: none is due) to the device.
func (n *Network) writeICMP(msg []byte) {
	if msg != nil {
		n.writeDevice([][]byte{append(make([]byte, tun.Offset, tun.Offset+len(msg)), msg...)})
	}
}

// readDevice reads batches of packets from the device and sends each on
// its way, until the device is closed.
func (n *Network) readDevice() {
	defer n.wg.Done()
	bs := n.dev.BatchSize()
	rbs := make([]*pbuf, bs) // the buffers read into (buf.go)
	bufs := make([][]byte, bs)
	size := 0
	sizes := make([]int, bs)
	for {
		// At first, and when the device's MTU grew past the buffers:
		// they hold a jumbo frame at least, so that an MTU raised while
		// a Read waits seldom finds them short.
		if want := tun.Offset + int(max(n.devMTU.Load(), n.mtu.Load(), minReadBuffer)); want > size {
			size = want
			for i := range bufs {
				rbs[i] = bigBuf(size)
				bufs[i] = rbs[i].b[:size]
			}
		}
		cnt, err := n.dev.Read(bufs, sizes, tun.Offset)
		for i := range cnt {
			rbs[i].n = sizes[i]
			if n.outbound(rbs[i]) { // a queue has it now
				rbs[i] = bigBuf(size)
				bufs[i] = rbs[i].b[:size]
			}
		}
		if err != nil {
			if errors.Is(err, os.ErrClosed) || n.ctx.Err() != nil {
				return
			}
			if n.quiet.Allow("device read") {
				n.log.Warn("vip: reading the device", "err", err)
			}
		}
	}
}
