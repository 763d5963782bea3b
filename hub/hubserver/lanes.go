package hubserver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/nat"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/wire"
)

// Lanes: a trunk between two hubs of protocol version wire.VersionLanes
// carries several TCP connections (wire/lane.go has the wire format and
// the rules). One TCP connection across a long, lossy path carries a
// fraction of what the path does (its window and buffers bound it, and a
// loss halves it), and every circuit between two hubs crosses their trunk:
// lanes let those circuits run side by side.
//
// Who adds them: the hub that dialled the trunk, to the address it
// dialled (a spliced trunk, one through an ssh tunnel, one to a hub of an
// older version or from a hub behind a NAT known to allocate ports in
// sequence keeps one connection). How many: Config.Lanes, or by
// default as the path needs them: one per laneRTT of the trunk's measured
// round trip, up to autoLanes (one on a LAN), dialled once the round trip
// is known, before traffic needs them, so that the streams of the first
// transfer spread over them too (a circuit stays on the connection it was
// opened on): the longer the path, the less one connection carries. A lane
// runs the full TLS handshake again (the peer must prove the same hub
// identity) and proves it belongs to this trunk with a secret bound to the
// trunk's first session (hub.LaneProof); the accepting hub refuses any
// other join, naming why, and both ends say the same.
//
// Circuits: the end that opens a circuit on a trunk puts it on its least
// loaded lane (fewest circuits); all frames of a circuit, both ways, stay
// on the lane its open came on, so they stay in order. A lane that fails
// resets its circuits as a lost trunk would, and is dialled again later;
// the trunk's first connection failing ends every lane.

const (
	// MaxLanes bounds the connections of one trunk, on either end.
	MaxLanes = 16
	// autoLanes bounds what a trunk dials with Config.Lanes 0.
	autoLanes = 8
	// laneRTT: with Config.Lanes 0 a trunk carries one connection per
	// laneRTT of its round trip, rounded up (a path of 160 ms: 8; of 40
	// ms, a little more measured: 5; a LAN's or loopback's: 1).
	laneRTT = 10 * time.Millisecond
	// laneRetry is how long a trunk waits before dialling lanes again
	// after a lane failed to join; laneRefusedRetry after a refusal.
	laneRetry        = 10 * time.Second
	laneRefusedRetry = 10 * time.Minute
)

// lane is one connection of a trunk; a peer's lanes[0] is the trunk's
// first connection (peer.t).
type lane struct {
	t *hub.Trunk
	n int // circuits on it (under the peer's cmu)
}

// lanesWanted is how many connections the trunk to p should carry.
func (h *Hub) lanesWanted(p *peer) int {
	if !p.isHub || !p.dialed || p.spec == "" || p.tunnel || strings.HasPrefix(p.spec, "ssh://") || p.version < wire.VersionLanes || h.helloVersion() < wire.VersionLanes || h.cfg.Lanes == 1 {
		return 1
	}
	h.mu.Lock()
	seq := h.nat.err == nil && h.nat.class.Allocation == nat.Sequential
	h.mu.Unlock()
	if seq {
		// behind a NAT known to allocate ports in sequence, every
		// connection dialled moves its counter, which splices predict
		// (DialTCP's reason for one SYN a dial)
		return 1
	}
	if h.cfg.Lanes > 1 {
		return min(h.cfg.Lanes, MaxLanes)
	}
	rtt := p.t.MinRTT()
	if rtt <= 0 {
		return 1
	}
	return min(max(int(math.Ceil(float64(rtt)/float64(laneRTT))), 1), autoLanes)
}

// pickLaneLocked is the lane for a circuit this hub opens on p's trunk:
// the one with the fewest circuits. p.cmu is held.
func (p *peer) pickLaneLocked() *lane {
	best := p.lanes[0]
	for _, l := range p.lanes[1:] {
		if l.n < best.n && !l.t.IsClosed() {
			best = l
		}
	}
	return best
}

// laneCount is how many connections p's trunk carries.
func (p *peer) laneCount() int {
	p.cmu.Lock()
	defer p.cmu.Unlock()
	return len(p.lanes)
}

// extraLanes lists the trunk's connections but the first.
func (p *peer) extraLanes() []*lane {
	p.cmu.Lock()
	defer p.cmu.Unlock()
	return append([]*lane(nil), p.lanes[1:]...)
}

// maintainLanes starts dialling the lanes p's trunk lacks (on every
// tick; one dialler at a time per trunk).
func (h *Hub) maintainLanes(ctx context.Context, p *peer) {
	want := h.lanesWanted(p)
	p.cmu.Lock()
	if p.gone() || p.retired || p.laneDialing || len(p.lanes) >= want || time.Now().Before(p.laneAfter) {
		p.cmu.Unlock()
		return
	}
	p.laneDialing = true
	p.cmu.Unlock()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		err := h.dialLanes(ctx, p, want)
		p.cmu.Lock()
		p.laneDialing = false
		if err != nil {
			p.laneAfter = time.Now().Add(laneRetry)
			if errors.Is(err, hub.ErrLaneRefused) {
				p.laneAfter = time.Now().Add(laneRefusedRetry)
			}
		}
		p.cmu.Unlock()
		if err != nil && ctx.Err() == nil && !p.t.IsClosed() {
			h.logf("hub %s: another connection of %s: %v (the trunk goes on with %d)", h.cfg.Name, p.t.Desc(), err, p.laneCount())
		}
	}()
}

// dialLanes adds connections to p's trunk until it has want, dialling
// them at once (each takes a few round trips).
func (h *Hub) dialLanes(ctx context.Context, p *peer, want int) error {
	n := want - p.laneCount()
	errs := make(chan error, max(n, 0))
	for range n {
		go func() {
			l, r, err := h.dialLane(ctx, p)
			if err != nil {
				errs <- err
				return
			}
			if !p.addLane(l) {
				l.t.Close(errors.New("trunk closed"))
				errs <- nil
				return
			}
			h.wg.Add(1)
			errs <- nil
			go func() { defer h.wg.Done(); h.runLane(p, l, r) }()
		}()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// dialLane dials, secures and joins one more connection of p's trunk.
func (h *Hub) dialLane(ctx context.Context, p *peer) (*lane, *wire.Reader, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	c, err := h.cfg.Dial(ctx, p.spec)
	if err != nil {
		return nil, nil, err
	}
	h.tuneTrunk(c)
	sec, err := hub.Secure(ctx, h.cfg.Creds, c, true, p.id, ca.Hub)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	l, r, err := h.joinOver(ctx, c, sec, p)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return l, r, nil
}

// joinOver sends the lane's join hello over c and reads the answer.
func (h *Hub) joinOver(ctx context.Context, c net.Conn, sec *hub.Secured, p *peer) (*lane, *wire.Reader, error) {
	mine, err := sec.LaneSecret()
	if err != nil {
		return nil, nil, err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	hello := &wire.Hello{Role: "hub", Machine: h.machine(), Version: h.helloVersion(), Lane: &wire.LaneJoin{Proof: hub.LaneProof(p.laneSecret, mine)}}
	if err := hub.WriteHello(c, sec.Sealer, hello); err != nil {
		return nil, nil, sec.Explain(err)
	}
	if err := sec.Verdict(); err != nil {
		return nil, nil, err
	}
	theirs, err := sec.ReadHello()
	if err != nil {
		return nil, nil, err
	}
	if theirs.Role != "hub" {
		return nil, nil, fmt.Errorf("%s is a %s, not a hub", sec.Peer.Short(), theirs.Role)
	}
	_ = c.SetDeadline(time.Time{})
	t := hub.NewTrunk(c, sec.Sealer, fmt.Sprintf("hub %s (%s, another connection)", p.name, c.RemoteAddr()), false)
	return &lane{t: t}, sec.Reader, nil
}

// laneRefusal is a refusal of a lane join, as both ends name it.
func laneRefusal(format string, args ...any) *hub.RefusedError {
	return &hub.RefusedError{Code: wire.RefusedLane, Reason: fmt.Sprintf(format, args...)}
}

// acceptLane takes a connection whose hello asks to join a trunk as a
// lane, or refuses it, naming why.
func (h *Hub) acceptLane(c net.Conn, sec *hub.Secured, hello *wire.Hello, pend *direct.Pending) {
	id := sec.Peer
	name := hello.Machine.Name
	if name == "" {
		name = id.Short()
	}
	if h.cfg.Lanes == 1 || h.helloVersion() < wire.VersionLanes {
		h.refuse(c, sec.Sealer, id.Short(), laneRefusal("hub %s keeps one connection per trunk", h.cfg.Name))
		return
	}
	secret, err := sec.LaneSecret()
	if err != nil {
		h.logf("hub %s: connection from %s (%s): %v", h.cfg.Name, c.RemoteAddr(), id.Short(), err)
		c.Close()
		return
	}
	h.mu.Lock()
	p := h.hubs[id]
	h.mu.Unlock()
	var e *hub.RefusedError
	switch {
	case p == nil:
		e = laneRefusal("hub %s has no trunk with hub %s to join", h.cfg.Name, name)
	case p.dialed:
		e = laneRefusal("hub %s dialled its trunk with hub %s itself: only a trunk's dialler adds connections", h.cfg.Name, name)
	case p.version < wire.VersionLanes:
		e = laneRefusal("the trunk of hub %s with hub %s runs protocol version %d, without lanes", h.cfg.Name, name, p.version)
	case !hub.CheckLaneProof(p.laneSecret, secret, hello.Lane.Proof):
		e = laneRefusal("the join's proof does not match the session of hub %s's trunk with hub %s", h.cfg.Name, name)
	case p.laneCount() >= MaxLanes:
		e = laneRefusal("the trunk of hub %s with hub %s has %d connections already, the most it takes", h.cfg.Name, name, MaxLanes)
	}
	if e != nil {
		h.refuse(c, sec.Sealer, id.Short(), e)
		return
	}
	_ = c.SetDeadline(time.Time{})
	pend.Done()
	h.tuneTrunk(c)
	l := &lane{t: hub.NewTrunk(c, sec.Sealer, fmt.Sprintf("hub %s (%s, another connection)", p.name, c.RemoteAddr()), false)}
	if !p.addLane(l) {
		l.t.Close(errors.New("trunk closed"))
		return
	}
	l.t.SendControl(&wire.Message{Kind: wire.KHello, Hello: &wire.Hello{Role: "hub", Machine: h.machine(), Version: h.helloVersion(), Observed: l.t.Remote()}})
	h.runLane(p, l, sec.Reader)
}

// addLane adds a connection to p's trunk; false if the trunk is gone.
func (p *peer) addLane(l *lane) bool {
	p.cmu.Lock()
	defer p.cmu.Unlock()
	if p.gone() || p.t.IsClosed() {
		return false
	}
	p.lanes = append(p.lanes, l)
	return true
}

// runLane reads a lane until it fails, then drops it and resets its
// circuits.
func (h *Hub) runLane(p *peer, l *lane, r *wire.Reader) {
	err := l.t.ReadLoop(r, func(f wire.Frame) error { return p.handleOn(l, f) })
	p.cmu.Lock()
	for i, x := range p.lanes {
		if x == l {
			p.lanes = append(p.lanes[:i], p.lanes[i+1:]...)
			break
		}
	}
	var refs []circRef
	for _, ref := range p.circuits {
		if ref.c.ends[ref.side].ln == l {
			refs = append(refs, ref)
		}
	}
	p.cmu.Unlock()
	if !p.t.IsClosed() {
		h.logf("hub %s: a connection of %s closed: %v (%d circuits on it reset)", h.cfg.Name, p.t.Desc(), err, len(refs))
	}
	reason := fmt.Sprintf("hub %s: connection of the trunk to %s lost: %v", h.cfg.Name, p.name, err)
	for _, ref := range refs {
		h.resetRef(ref, reason)
	}
}

// closeLanes closes the connections of p's trunk but the first (once the
// first is gone).
func (p *peer) closeLanes(cause error) {
	for _, l := range p.extraLanes() {
		l.t.Close(cause)
	}
}

// tuneTrunk sets the congestion control of a connection between hubs
// (Config.Congestion); where the kernel refuses, the connection keeps
// the kernel's default.
func (h *Hub) tuneTrunk(c net.Conn) {
	algo := h.cfg.Congestion
	switch algo {
	case "":
		algo = "bbr"
	case "default":
		return
	}
	_ = hub.SetCongestion(c, algo)
}
