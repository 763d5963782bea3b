package vconn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/nat"
	"github.com/gridlink/gridlink/wire"
)

// Spare connections.
//
// A direct setup costs a TCP round trip, then a TLS 1.3 handshake: a second
// round trip and about a millisecond of CPU on each end. After a direct
// connection to a target succeeds, the node opens one more to it in the
// background and keeps it (and a second one: sparesPerTarget),
// authenticated and idle, for Config.SpareTTL.
// The next direct setup to that target takes it and only asks for the
// port, in one round trip:
//
//	handshake request   "s" (request.go): a spare, no port yet
//	dialler → acceptor  'P', port (2 bytes, big-endian)
//	acceptor → dialler  'A' (accepted), or 'R', n (1 byte), n bytes of reason
//
// and then, as on every direct connection, the commit byte. An acceptor
// holds a spare that names no port for at most maxSpareHold, and at most
// maxHeldSpares of them.
//
// Reverse and spliced setups cost more: two and a half and three and a
// half round trips, where a routed one costs one. After a connection by
// one of them is committed (or a spare of it taken), the node sets up
// spares by that method too, pre-arranged: a reverse request or a splice
// offer naming wire.SparePort instead of a port. The target holds the
// connection it called back or spliced as it holds a direct spare, and
// the next setup by that method takes it and asks for its port in one
// round trip of the direct path, as above. A target that does not know
// spares answers the port refused: the spare fails, nothing else.
const (
	defaultSpareTTL = 20 * time.Second
	maxSpareTTL     = 50 * time.Second
	maxSpareHold    = maxSpareTTL + 10*time.Second
	sparesPerTarget = 2   // enough for back-to-back dials on a short round trip
	maxSpares       = 64  // spares a node keeps for its own dials
	maxHeldSpares   = 256 // spares a node holds open for others
	spareAsk        = 'P'
	spareAccept     = 'A'
	spareRefuse     = 'R'
)

// errSpareDead means a spare connection broke before it was used: the
// dialler falls back to a fresh direct setup.
var errSpareDead = errors.New("spare connection broke")

type spare struct {
	conn   *direct.Conn
	method Method // how it was set up: direct, reverse or splice
	timer  *time.Timer
}

// spareKey names the spares being set up to one target by one method.
type spareKey struct {
	target identity.ID
	method Method
}

func (n *Node) spareTTL() time.Duration {
	switch {
	case n.cfg.SpareTTL < 0:
		return 0
	case n.cfg.SpareTTL == 0:
		return defaultSpareTTL
	}
	return min(n.cfg.SpareTTL, maxSpareTTL)
}

// takeSpare removes and returns a spare set up by method m kept for
// target, if any.
func (n *Node) takeSpare(target identity.ID, m Method) *direct.Conn {
	n.spares.mu.Lock()
	defer n.spares.mu.Unlock()
	ss := n.spares.byTarget[target]
	i := slices.IndexFunc(ss, func(s *spare) bool { return s.method == m })
	if i < 0 {
		return nil
	}
	s := ss[i]
	if len(ss) == 1 {
		delete(n.spares.byTarget, target)
	} else {
		n.spares.byTarget[target] = slices.Delete(ss, i, i+1)
	}
	n.spares.count--
	s.timer.Stop()
	return s.conn
}

// keptLocked counts the spares by method m kept for target.
// n.spares.mu must be held.
func (n *Node) keptLocked(target identity.ID, m Method) int {
	k := 0
	for _, s := range n.spares.byTarget[target] {
		if s.method == m {
			k++
		}
	}
	return k
}

// dropSparesLocked closes every spare. n.spares.mu must be held.
func (n *Node) dropSparesLocked() {
	for id, ss := range n.spares.byTarget {
		for _, s := range ss {
			s.timer.Stop()
			s.conn.Close()
		}
		delete(n.spares.byTarget, id)
	}
	n.spares.count = 0
}

// Spares is the number of spare connections this node keeps.
func (n *Node) Spares() int {
	n.spares.mu.Lock()
	defer n.spares.mu.Unlock()
	return n.spares.count
}

// spareFlight counts the spares on their way to one target; settled is
// closed (and replaced) each time one arrives or fails.
type spareFlight struct {
	n       int
	settled chan struct{}
}

// refillSpare opens spares to target by method m (direct, reverse or
// splice) in the background, one after the other, until sparesPerTarget
// are kept, unless spares are off, one fails, or the node keeps too many.
// One at a time, because the next dial is likely soon (back-to-back dials
// are why there are spares at all) and two handshakes at once would both
// finish later: on a short round trip the CPU the handshakes take is most
// of a setup's time.
//
// Not spliced spares from behind a sequential NAT (nor to a node behind
// one, which refuses them: answerSplice): a splice in the background
// would take the port a splice of this node's predicts (each new mapping
// takes the next port), so it would spoil the setups it is meant to
// speed up.
func (n *Node) refillSpare(target identity.Machine, m Method) {
	if m == Splice && n.sequentialNAT() {
		return
	}
	ttl := n.spareTTL()
	n.spares.mu.Lock()
	defer n.spares.mu.Unlock()
	if ttl == 0 || n.ctx.Err() != nil {
		return
	}
	key := spareKey{target.ID, m}
	f := n.spares.flights[key]
	if f == nil {
		f = &spareFlight{settled: make(chan struct{})}
	}
	if f.n == 0 && n.keptLocked(target.ID, m) < sparesPerTarget && n.spares.count+n.spares.inflight < maxSpares {
		f.n++
		n.spares.inflight++
		n.spares.flights[key] = f
		n.wg.Add(1)
		go n.openSpare(target, m, f, ttl)
	}
}

// spareConn sets up one spare to target by method m: the handshake's
// request names no port (direct), or the reverse request or splice offer
// names wire.SparePort.
func (n *Node) spareConn(ctx context.Context, target identity.Machine, m Method) (*direct.Conn, error) {
	var c net.Conn
	var err error
	switch m {
	case Reverse:
		c, err = n.reverse(ctx, target, wire.SparePort)
	case Splice:
		c, err = n.splice(ctx, target, wire.SparePort, 1)
	default:
		return n.dialer.Dial(ctx, target, request{spare: true}.String())
	}
	if err != nil {
		return nil, err
	}
	dc, ok := c.(*direct.Conn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("a %s spare is a %T, not a direct connection", m, c)
	}
	return dc, nil
}

// openSpare sets up one spare to target by method m and keeps it for ttl.
func (n *Node) openSpare(target identity.Machine, m Method, f *spareFlight, ttl time.Duration) {
	defer n.wg.Done()
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	c, err := n.spareConn(ctx, target, m)
	cancel()
	key := spareKey{target.ID, m}
	n.spares.mu.Lock()
	f.n--
	n.spares.inflight--
	close(f.settled)
	f.settled = make(chan struct{})
	if f.n == 0 {
		delete(n.spares.flights, key)
	}
	ok := err == nil && n.ctx.Err() == nil && n.keptLocked(target.ID, m) < sparesPerTarget
	if ok {
		s := &spare{conn: c, method: m}
		s.timer = time.AfterFunc(ttl, func() { n.expire(target.ID, s) })
		n.spares.byTarget[target.ID] = append(n.spares.byTarget[target.ID], s)
		n.spares.count++
	}
	n.spares.mu.Unlock()
	if err == nil && !ok {
		c.Close()
	}
	if err != nil && m != Direct {
		n.cfg.Logf("vconn: %s spare to %s: %v", m, target, err)
	}
	if ok {
		n.refillSpare(target, m) // the next one
	}
}

// expire closes spare s of target if it is still kept.
func (n *Node) expire(target identity.ID, s *spare) {
	n.spares.mu.Lock()
	ss := n.spares.byTarget[target]
	if i := slices.Index(ss, s); i >= 0 {
		ss = slices.Delete(ss, i, i+1)
		n.spares.count--
		if len(ss) == 0 {
			delete(n.spares.byTarget, target)
		} else {
			n.spares.byTarget[target] = ss
		}
	}
	n.spares.mu.Unlock()
	s.conn.Close()
}

// directSetup makes a direct connection to port on target (spareSetup).
func (n *Node) directSetup(ctx context.Context, target identity.Machine, port uint16) (net.Conn, bool, error) {
	return n.spareSetup(ctx, target, port, Direct, func(ctx context.Context) (net.Conn, error) {
		dc, err := n.dialer.Dial(ctx, target, request{port: port}.String())
		if err != nil {
			return nil, err
		}
		n.refillSpare(target, Direct)
		return dc, nil
	})
}

// spareSetup makes a connection to port on target by method m: through
// the spare by m kept for it; else, when a spare to it by m is on its
// way, through whichever comes first, that spare or a fresh setup
// (fresh; a splice waits for the spare instead, then sets up afresh if
// none came); else a fresh setup. spared says whether a spare carried the
// connection (or the refusal).
func (n *Node) spareSetup(ctx context.Context, target identity.Machine, port uint16, m Method, fresh func(context.Context) (net.Conn, error)) (c net.Conn, spared bool, err error) {
	if sc := n.takeSpare(target.ID, m); sc != nil {
		c, err = useSpare(ctx, sc, port)
		if !errors.Is(err, errSpareDead) {
			if err == nil {
				n.refillSpare(target, m)
			}
			return c, true, err
		}
		n.cfg.Logf("vconn: %s spare connection to %s: %v; setting up afresh", m, target, err)
	}
	var coming chan struct{}
	n.spares.mu.Lock()
	if f := n.spares.flights[spareKey{target.ID, m}]; f != nil {
		coming = f.settled
	}
	n.spares.mu.Unlock()
	if coming == nil {
		c, err = fresh(ctx)
		return c, false, err
	}
	if m == Splice {
		// Two splices at once from one host spoil each other's port
		// prediction (behind a sequential NAT the other's mapping takes
		// the predicted port): wait for the spare on its way instead.
		select {
		case <-coming:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
		if sc := n.takeSpare(target.ID, m); sc != nil {
			if c, err = useSpare(ctx, sc, port); !errors.Is(err, errSpareDead) {
				if err == nil {
					n.refillSpare(target, m)
				}
				return c, true, err
			}
		}
		c, err = fresh(ctx)
		return c, false, err
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type outcome struct {
		c   net.Conn
		err error
	}
	done := make(chan outcome, 1)
	go func() { c, err := fresh(fctx); done <- outcome{c, err} }()
	select {
	case o := <-done:
		return o.c, false, o.err
	case <-coming:
	}
	if sc := n.takeSpare(target.ID, m); sc != nil {
		if c, err = useSpare(ctx, sc, port); !errors.Is(err, errSpareDead) {
			cancel()
			if o := <-done; o.c != nil {
				o.c.Close() // the fresh setup lost
			}
			if err == nil {
				n.refillSpare(target, m)
			}
			return c, true, err
		}
	}
	o := <-done
	return o.c, false, o.err
}

// useSpare asks the acceptor of spare c for port: c itself once accepted,
// a *direct.RefusedError if no one listens there, errSpareDead if c broke.
func useSpare(ctx context.Context, c *direct.Conn, port uint16) (net.Conn, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Second)
	}
	_ = c.SetDeadline(deadline)
	if _, err := c.Write([]byte{spareAsk, byte(port >> 8), byte(port)}); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %v", errSpareDead, err)
	}
	err := readSpareAnswer(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// readSpareAnswer reads the acceptor's answer to a port request.
func readSpareAnswer(r io.Reader) error {
	var b [2]byte
	if _, err := io.ReadFull(r, b[:1]); err != nil {
		return fmt.Errorf("%w: %v", errSpareDead, err)
	}
	switch b[0] {
	case spareAccept:
		return nil
	case spareRefuse:
		if _, err := io.ReadFull(r, b[1:2]); err != nil {
			return fmt.Errorf("%w: refusal cut short: %v", errSpareDead, err)
		}
		reason := make([]byte, b[1])
		if _, err := io.ReadFull(r, reason); err != nil {
			return fmt.Errorf("%w: refusal cut short: %v", errSpareDead, err)
		}
		return &direct.RefusedError{What: direct.RefusedConnection, Reason: printable(reason)}
	}
	return fmt.Errorf("%w: answer %#x, want %q or %q", errSpareDead, b[0], spareAccept, spareRefuse)
}

// printable keeps the visible ASCII of a peer's text.
func printable(b []byte) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c >= ' ' && c <= '~' {
			out = append(out, c)
		}
	}
	return string(out)
}

// readSpareAsk reads the dialler's port request on a held spare.
func readSpareAsk(r io.Reader) (uint16, error) {
	var b [3]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	port := binary.BigEndian.Uint16(b[1:])
	if b[0] != spareAsk || port == 0 {
		return 0, fmt.Errorf("bad spare request %x", b)
	}
	return port, nil
}

// holdOthersSpare holds c, another node's spare set up by method m that
// this node called back or spliced, until its port is asked (holdSpare);
// it closes c when this node holds too many or is closing.
func (n *Node) holdOthersSpare(c *direct.Conn, peer identity.Machine, m Method) {
	n.spares.mu.Lock()
	if n.ctx.Err() != nil || len(n.spares.held) >= maxHeldSpares {
		n.spares.mu.Unlock()
		c.Close()
		return
	}
	n.spares.held[c] = true
	n.spares.mu.Unlock()
	n.wg.Add(1)
	go n.holdSpare(c, peer, m)
}

// spareRoom says why this node holds no more spares of others, or nil.
// spareAsked says why this node will not set up a spare by method m
// (reverse or splice) that another node asks for, or nil: not from
// behind a sequential NAT (a call back or splice in the background would
// take the port a splice of this host's predicts), nor past
// maxHeldSpares.
func (n *Node) spareAsked(m Method) error {
	if n.sequentialNAT() {
		return fmt.Errorf("no %s spares with %s: behind its sequential NAT a %s in the background would take the port a splice of its predicts", m, n.cfg.Name, m)
	}
	return n.spareRoom()
}

func (n *Node) spareRoom() error {
	n.spares.mu.Lock()
	defer n.spares.mu.Unlock()
	if len(n.spares.held) >= maxHeldSpares {
		return fmt.Errorf("%s holds %d spare connections already", n.cfg.Name, maxHeldSpares)
	}
	return nil
}

// holdSpare keeps an accepted spare (set up by method m) until its
// dialler names a port, then answers and hands the connection on like any
// other by m.
func (n *Node) holdSpare(c *direct.Conn, peer identity.Machine, m Method) {
	defer n.wg.Done()
	_ = c.SetReadDeadline(time.Now().Add(maxSpareHold))
	port, err := readSpareAsk(c)
	n.spares.mu.Lock()
	delete(n.spares.held, c)
	n.spares.mu.Unlock()
	if err != nil {
		c.Close() // expired, closed by its dialler, or garbage
		return
	}
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := n.access(port, c.Conn.Peer); err != nil {
		n.cfg.Logf("vconn: spare %s connection from %s to port %d refused: %v", m, peer, port, err)
		reason := err.Error()
		if len(reason) > 255 {
			reason = reason[:255]
		}
		_, _ = c.Write(append([]byte{spareRefuse, byte(len(reason))}, reason...))
		c.Close()
		return
	}
	if _, err := c.Write([]byte{spareAccept}); err != nil {
		c.Close()
		return
	}
	_ = c.SetWriteDeadline(time.Time{})
	n.deliver(c, m, peer, port)
}

// sequentialNAT says this host's NAT was last classified as taking each
// new mapping's port from the one before (nat.Sequential).
func (n *Node) sequentialNAT() bool {
	n.self.mu.Lock()
	defer n.self.mu.Unlock()
	return n.self.nat.class.Allocation == nat.Sequential
}
