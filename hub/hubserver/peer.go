package hubserver

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/wire"
)

var errTooManyFiles = syscall.EMFILE

// peer is the hub's side of one trunk: to a neighbour hub or to a node.
type peer struct {
	h       *Hub
	t       *hub.Trunk
	id      identity.ID
	name    string
	isHub   bool
	version int              // its hello's protocol version (wire.Version)
	dialed  bool             // this hub dialled the link
	machine identity.Machine // a node's identifier, hub fields filled; a hub's hello machine
	who     pki.Peer         // what its handshake proved, for rechecks when the revocation list changes

	// a node's hold on its name (names.go)
	owner  string    // the identity behind it (pki.Peer.Owner)
	bound  bool      // its certificate certifies its name
	since  time.Time // when its admission started
	claim  *claim    // its claim, handed over to h.nodes by register
	claimQ uint64
	// one attachment per identity (oneid.go)
	instance string // its hello's process instance ("": none)
	replaces *peer  // the holder of its identity here it was judged against (nil: none)
	// a node that moved to another hub (wire.KMoved) and keeps this link
	// while its circuits carry on: lookups no longer find it here (under h.mu)
	movedTo identity.ID

	// a hub neighbour's table as this hub last sent it (routing_send.go)
	gmu    sync.Mutex                   // orders the table sends to it
	sent   map[identity.ID]wire.RouteAd // under gmu
	linked time.Time                    // when its trunk began running (run), under gmu
	tabled bool                         // its first whole table went out, under gmu
	got    map[identity.ID]wire.RouteAd // what it last said of each hub (routing.go), under h.mu
	cost   time.Duration                // its trunk's round trip when got was last taken (routing_send.go), under h.mu
	seed   time.Duration                // the cost of the trunk it replaced, until its own is measured (routing.go), under h.mu

	// its table messages waiting to be taken (routing.go queueGossip)
	gqmu     sync.Mutex
	gq       []*wire.Gossip
	gworking bool       // a goroutine takes them
	gapply   sync.Mutex // held while taking them, so they are taken in order

	// a hub trunk's connections (lanes.go)
	spec       string // the address this hub dialled the trunk at ("": accepted or spliced)
	tunnel     bool   // through an sshd that delays small writes
	laneSecret []byte // the trunk's secret that lanes prove (hub.Secured.LaneSecret)
	main       *lane  // the trunk's first connection, lanes[0]

	cmu         sync.Mutex
	circuits    map[uint32]circRef // circuits on this link, by this link's number
	nextCirc    uint32
	retired     bool      // replaced by a newer trunk to the same hub: closed once its last circuit ends
	lanes       []*lane   // the trunk's connections, lanes[0] on t
	laneDialing bool      // a goroutine dials lanes
	laneAfter   time.Time // no lane dialled before
}

// errTrunkDrained closes a retired trunk (see retire) once its last
// circuit has ended.
var errTrunkDrained = errors.New("replaced by a newer trunk to the same hub, and its last circuit ended")

func (h *Hub) newPeer(c net.Conn, sealer *wire.Sealer, hello *wire.Hello, dialed, nagle bool) *peer {
	p := &peer{h: h, id: hello.Machine.ID, name: hello.Machine.Name, isHub: hello.Role == "hub", dialed: dialed}
	if p.name == "" {
		p.name = p.id.Short()
	}
	role := "node"
	if p.isHub {
		role = "hub"
	}
	// the dialler of a hub link through an sshd that delays small writes
	// knows it (direct.Nagle); the accepting end learns it from its hello.
	tunnel := p.isHub && (nagle || hello.Tunnel)
	p.t = hub.NewTrunk(c, sealer, fmt.Sprintf("%s %s (%s)", role, p.name, c.RemoteAddr()), tunnel)
	if p.isHub && !h.counts.off {
		p.t.CountControl(&h.counts.control)
	}
	p.tunnel = tunnel
	p.main = &lane{t: p.t}
	p.lanes = []*lane{p.main}
	p.machine = hello.Machine
	p.machine.Addrs = slices.Clone(p.machine.Addrs)
	p.machine.Virtual = nil
	p.version = hello.Version
	p.instance = hello.Instance
	if !p.isHub {
		p.machine = h.nodeRecord(hello.Machine, p.t.Remote())
	}
	p.nextCirc = hub.FirstCircuit(dialed)
	p.circuits = map[uint32]circRef{}
	return p
}

// send sends m on p's link as p's protocol version decodes it (a lookup's
// answer without virtual addresses for a peer older than
// wire.VersionVirtual, without the hubs it could not ask for one older
// than wire.VersionUnreached: its strict decoder would close the link),
// and without host-scoped addresses for a peer on another host
// (hostscope.go).
func (p *peer) send(m *wire.Message) bool {
	if !p.onHost() {
		m = wire.StripHostScoped(m)
	}
	return p.t.SendControl(wire.StripUnreached(wire.StripVirtual(m, p.version), p.version))
}

// run starts a registered peer's link, reads it until it fails and cleans
// up.
func (h *Hub) run(p *peer, r *wire.Reader) {
	if p.isHub {
		h.logf("hub %s: linked to %s, dialled=%v", h.cfg.Name, p.t.Desc(), p.dialed)
		p.gmu.Lock()
		p.linked = time.Now()
		p.gmu.Unlock()
		p.t.Ping()
		h.sendTable(p) // not before the trunk's round trip is measured (routing_send.go)
		h.sendCRLs(p)
	}
	err := p.t.ReadLoop(r, func(f wire.Frame) error { return p.handleOn(p.main, f) })
	h.unregister(p, err)
}

// register adds a peer whose hello was received.
func (h *Hub) register(p *peer) error {
	h.mu.Lock()
	if h.ctx == nil || h.ctx.Err() != nil {
		h.mu.Unlock()
		return errors.New("hub shutting down")
	}
	var old *peer
	if p.isHub {
		if p.id == h.id {
			h.mu.Unlock()
			return errors.New("a link to this hub itself")
		}
		if e := h.hubs[p.id]; e != nil {
			// Two links between the same hubs: both ends keep the one
			// dialled by the hub with the smaller ID (the older one if the
			// same hub dialled both).
			if h.dialerOf(p) == h.dialerOf(e) || h.dialerOf(e) == minID(h.id, p.id) {
				h.mu.Unlock()
				return fmt.Errorf("already linked to hub %s: dropping the duplicate link", p.name)
			}
			old = e
			h.repointLocked(old, p)
		}
		h.hubs[p.id] = p
	} else {
		if cl := p.claim; cl != nil {
			delete(h.claims, p.claimQ)
			p.claim = nil // handed over: kept, it held about 1 KiB a node for nothing
			if cl.lost != nil {
				h.mu.Unlock()
				return cl.lost
			}
		}
		old = h.nodes[p.id]
		if old != nil && old != p.replaces && !old.t.IsClosed() {
			// another process with p's identity was admitted while p was
			// judged (oneid.go): it keeps its place
			e := h.attachedRefusalLocked(old, p)
			h.mu.Unlock()
			return e
		}
		p.replaces = nil // judged: not kept alive by its successor
		h.nodes[p.id] = p
	}
	h.all[p] = struct{}{}
	// The first node is told other hubs at once, not at the next tick:
	// a hub that meets this one while it says it holds none does not
	// tell it its names (routing.go applyAds).
	first := !p.isHub && h.nodesAd == 0 && !h.legacy
	if first {
		h.nodesAd, h.nodesAdAt = len(h.nodes), time.Now()
	}
	h.mu.Unlock()
	if first {
		h.triggerUpdate()
	}
	if old != nil && old.isHub && old.retire() {
		h.logf("hub %s: %s replaced by a newer trunk from %s; it carries its circuits until they end", h.cfg.Name, old.t.Desc(), p.t.Remote())
	} else if old != nil {
		old.t.Close(fmt.Errorf("replaced by a new link from %s", p.t.Remote()))
	}
	return nil
}

// retire marks a hub trunk that a newer one to the same hub replaced
// (both ends keep the one the smaller ID dialled): no new circuit or
// route takes it, but the circuits already on it carry on, so two hubs
// that dialled each other at once do not reset what a node set up in
// between. It reports false when the trunk carries no circuit (then the
// caller closes it at once); else removeCircuit closes it after the last.
func (p *peer) retire() bool {
	p.cmu.Lock()
	defer p.cmu.Unlock()
	if len(p.circuits) == 0 {
		return false
	}
	p.retired = true
	return true
}

// repointLocked moves the routes through old to its replacement p, a
// trunk to the same neighbour hub. h.mu is held.
func (h *Hub) repointLocked(old, p *peer) {
	for _, r := range h.routes {
		if r.next == old {
			r.next = p
		}
	}
	p.seed = linkCost(old) // until its own first round trip (routing.go)
}

func (h *Hub) dialerOf(p *peer) identity.ID {
	if p.dialed {
		return h.id
	}
	return p.id
}

func minID(a, b identity.ID) identity.ID {
	if string(a[:]) < string(b[:]) {
		return a
	}
	return b
}

// unregister removes a peer whose link failed: its routes become
// unreachable and its circuits are reset.
func (h *Hub) unregister(p *peer, cause error) {
	h.mu.Lock()
	delete(h.all, p)
	lost := false
	if p.isHub {
		if h.hubs[p.id] == p {
			delete(h.hubs, p.id)
			lost = h.linkLostLocked(p)
			h.unreachedLocked() // names.go
		}
	} else {
		if h.nodes[p.id] == p {
			delete(h.nodes, p.id)
		}
		h.vipReleaseLocked(p) // its virtual addresses are free
	}
	h.mu.Unlock()
	if lost {
		h.triggerUpdate()
	}
	if p.isHub || !errors.Is(cause, hub.ErrClosedByPeer) {
		h.logf("hub %s: %s closed: %v", h.cfg.Name, p.t.Desc(), cause)
	}
	h.resetCircuits(p, fmt.Sprintf("hub %s: link to %s lost: %v", h.cfg.Name, p.t.Desc(), cause))
	p.closeLanes(fmt.Errorf("the trunk's first connection closed: %w", cause))
}

// handle dispatches one frame from the peer's first connection.
func (p *peer) handle(f wire.Frame) error { return p.handleOn(p.main, f) }

// handleOn dispatches one frame from the peer, received on lane l. An
// error is a protocol violation: the connection is closed and the error
// logged. A trunk's further connections carry circuit frames only.
func (p *peer) handleOn(l *lane, f wire.Frame) error {
	switch f.Type {
	case wire.TControl:
		if l != p.main {
			return errors.New("a control message on a further connection of a trunk")
		}
		m, err := wire.Decode(f.Payload)
		if err != nil {
			return err
		}
		return p.h.control(p, m)
	case wire.TOpen:
		return p.h.open(p, l, f)
	case wire.TPing, wire.TPong, wire.TData, wire.TWindow, wire.TFin, wire.TReset, wire.TAccept:
		return p.h.switchFrame(p, f)
	}
	return fmt.Errorf("unexpected %s frame", f.Type)
}

// sendAll queues a control message to each of peers.
func sendAll(peers []*peer, m *wire.Message) {
	b := wire.Encode(m)
	for _, p := range peers {
		p.t.Send(wire.TControl, 0, 0, b)
	}
}
