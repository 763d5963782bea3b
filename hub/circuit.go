package hub

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// Errors circuits report, wrapped with the reason. A target node's
// refusal (nothing listens on the port) is a *direct.RefusedError
// (direct.ErrRefused, What direct.RefusedConnection).
var (
	// ErrUnreachable: a hub could not take the circuit to its target (no
	// route to its hub, node not attached).
	ErrUnreachable = errors.New("target unreachable")
	// ErrReset: the circuit was aborted after it was set up (reset by the
	// peer, a hub link lost on the way).
	ErrReset = errors.New("circuit reset")
)

// FirstCircuit is the first circuit number a side allocates on a trunk:
// odd numbers for the side that dialled it.
func FirstCircuit(dialled bool) uint32 {
	if dialled {
		return 1
	}
	return 2
}

// lingerTime bounds how long a closed circuit waits for its peer to finish
// before resetting it.
const lingerTime = 30 * time.Second

// Addr names one end of a circuit: a node, a port on it, and its hub.
type Addr struct {
	ID   identity.ID
	Name string
	Hub  string
	Port uint16
}

func machineAddr(m identity.Machine, port uint16) Addr {
	return Addr{ID: m.ID, Name: m.Name, Hub: m.HubName, Port: port}
}

// Network is "gridlink".
func (a Addr) Network() string { return "gridlink" }

// String is the virtual address text: NODE[:PORT][@HUB].
func (a Addr) String() string {
	node := a.Name
	if node == "" {
		node = a.ID.String()
	}
	return identity.Addr{Node: node, Port: a.Port, Hub: a.Hub}.String()
}

// Circuit is a relayed connection through the hubs. It is a net.Conn with
// TCP's half-close (CloseWrite) and deadlines. Flow control is end to end:
// Write blocks while the peer's window is used up; the receive side holds
// at most the window it granted, which grows with the bandwidth-delay
// product from wire.InitialWindow up to wire.MaxWindow.
//
// Close mirrors TCP: with unread data it resets the circuit; otherwise it
// finishes our side (like CloseWrite), and the peer's further data resets
// the circuit.
type Circuit struct {
	sl       *slink
	id       uint32
	incoming bool
	local    Addr
	remote   Addr

	writeMu sync.Mutex // one Write or CloseWrite at a time, in order

	mu          sync.Mutex
	cond        sync.Cond
	established bool
	err         error // terminal: reset, refused, link lost
	closed      bool  // Close was called
	removed     bool
	finSent     bool
	peerFin     bool
	// receive side
	rbuf      chunkBuf
	rwin      int64 // window size
	granted   int64 // bytes granted to the peer, in all
	received  int64
	consumed  int64
	announced int64         // consumed at the last grant
	epoch     int64         // monotime when the current auto-tuning epoch began
	epochOff  int64         // consumed then
	rtt       time.Duration // from circuit pings
	loopRTT   time.Duration // from a grant to the first byte it allowed
	grantAt   int64         // monotime of the grant being timed, 0 if none
	grantOff  int64         // granted before it: the first byte beyond is the sample
	lastPing  int64
	// send side
	credit int64
	// deadlines
	rdl, wdl time.Time
	rt, wt   *time.Timer
	linger   *time.Timer
}

func newCircuit(sl *slink, id uint32, incoming bool, local, remote Addr) *Circuit {
	c := &Circuit{sl: sl, id: id, incoming: incoming, local: local, remote: remote,
		rwin: wire.InitialWindow, granted: wire.InitialWindow}
	c.cond.L = &c.mu
	return c
}

// LocalAddr is this end: our node, with the port for an accepted circuit.
func (c *Circuit) LocalAddr() net.Addr { return c.local }

// RemoteAddr is the peer: its node and, for a circuit we opened, the port.
func (c *Circuit) RemoteAddr() net.Addr { return c.remote }

func (c *Circuit) String() string {
	return fmt.Sprintf("circuit %d %s->%s", c.id, c.local, c.remote)
}

// Read reads received bytes; io.EOF once the peer finished and everything
// is read. It waits for the circuit to be accepted.
func (c *Circuit) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		switch {
		case c.closed:
			return 0, net.ErrClosed
		case c.established && c.rbuf.Len() > 0:
			if len(p) == 0 {
				return 0, nil
			}
			n := c.rbuf.Read(p)
			c.consumed += int64(n)
			c.maybeGrantLocked()
			return n, nil
		case c.err != nil:
			return 0, c.err
		case c.established && c.peerFin:
			return 0, io.EOF
		case !c.rdl.IsZero() && !time.Now().Before(c.rdl):
			return 0, os.ErrDeadlineExceeded
		}
		c.cond.Wait()
	}
}

// maybeGrantLocked tops the peer's window up once half of it was read,
// growing the window when the last one was used within about two round
// trips (the auto-tuning of QUIC and HTTP/2 implementations).
func (c *Circuit) maybeGrantLocked() {
	if c.consumed-c.announced < c.rwin/2 || c.err != nil || c.peerFin {
		return
	}
	now := monotime()
	// The round trip that matters is the loop a grant takes: to the sender,
	// and back as data through every queue on the way. Pings see only the
	// path; batching and queues add to it under load.
	if rtt := max(c.rtt, c.loopRTT); rtt > 0 && c.rwin < wire.MaxWindow {
		frac := float64(c.consumed-c.epochOff) / float64(c.rwin)
		if time.Duration(now-c.epoch) < time.Duration(4*frac*float64(rtt)) {
			c.rwin = min(2*c.rwin, wire.MaxWindow)
		}
	}
	c.epoch, c.epochOff = now, c.consumed
	inc := c.consumed + c.rwin - c.granted
	if c.grantAt == 0 {
		c.grantAt, c.grantOff = now, c.granted
	}
	c.granted += inc
	c.announced = c.consumed
	c.sl.t.Send(wire.TWindow, 0, c.id, wire.WindowPayload(uint32(inc)))
	if c.rtt == 0 || time.Duration(now-c.lastPing) > time.Second {
		c.pingLocked()
	}
}

// pingLocked measures the circuit's round trip (a ping switched end to
// end).
func (c *Circuit) pingLocked() {
	now := monotime()
	c.lastPing = now
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(now))
	c.sl.t.Send(wire.TPing, 0, c.id, b[:])
}

// Write sends p, blocking while the peer's window is used up. Before the
// accept, an opened circuit may already send wire.InitialWindow bytes; an
// incoming one must be accepted first. Large pieces of p go out without
// a copy (Trunk.SendRef): Write returns once the trunk's writer is done
// with them, also when its deadline passed meanwhile.
func (c *Circuit) Write(p []byte) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	n := 0
	var ref uint64 // the last large payload queued by reference (trunk_kept.go)
	defer func() {
		if ref != 0 {
			c.sl.t.Released(ref) // p is the caller's again once written
		}
	}()
	for len(p) > 0 {
		c.mu.Lock()
		for {
			var err error
			switch {
			case c.closed:
				err = net.ErrClosed
			case c.err != nil:
				err = c.err
			case c.finSent:
				err = errors.New("hub: write after CloseWrite")
			case c.incoming && !c.established:
				err = errors.New("hub: write on a circuit not accepted yet")
			case c.credit > 0:
			case !c.wdl.IsZero() && !time.Now().Before(c.wdl):
				err = os.ErrDeadlineExceeded
			default:
				c.cond.Wait()
				continue
			}
			if err != nil {
				c.mu.Unlock()
				return n, err
			}
			break
		}
		k := int(min(int64(len(p)), c.credit, MaxData))
		c.credit -= int64(k)
		c.mu.Unlock()
		if k >= KeepAbove {
			r, ok := c.sl.t.SendRef(c.id, p[:k])
			if !ok {
				return n, c.linkErr()
			}
			ref = r
		} else if !c.sl.t.Send(wire.TData, 0, c.id, p[:k]) {
			return n, c.linkErr()
		}
		p = p[k:]
		n += k
	}
	return n, nil
}

// linkErr is the error of a circuit whose link is gone.
func (c *Circuit) linkErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return fmt.Errorf("%w: hub link to %s lost", ErrReset, c.sl.hub.Name)
}

// CloseWrite finishes our direction: the peer reads io.EOF after the data
// sent so far; our Read goes on working.
func (c *Circuit) CloseWrite() error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return net.ErrClosed
	case c.err != nil:
		c.mu.Unlock()
		return c.err
	case c.finSent:
		c.mu.Unlock()
		return nil
	case c.incoming && !c.established:
		c.mu.Unlock()
		return errors.New("hub: CloseWrite on a circuit not accepted yet")
	}
	c.finSent = true
	done := c.peerFin
	c.mu.Unlock()
	c.sl.t.Send(wire.TFin, 0, c.id, nil)
	if done {
		c.sl.remove(c)
	}
	return nil
}

// Close closes the circuit: a reset if received data is left unread (or
// the circuit was never accepted), else our side finishes and the circuit
// goes once the peer finishes too (at most lingerTime later).
func (c *Circuit) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.cond.Broadcast()
	c.stopTimersLocked()
	c.mu.Unlock()

	c.writeMu.Lock() // a blocked Write returns at once now
	defer c.writeMu.Unlock()
	c.mu.Lock()
	unread := c.rbuf.Len() > 0
	c.rbuf.Reset()
	switch {
	case c.err != nil || c.removed:
		c.mu.Unlock()
		c.sl.remove(c)
	case unread || (c.incoming && !c.established):
		c.err = fmt.Errorf("%w: closed", ErrReset)
		c.mu.Unlock()
		reason := "connection reset: closed by " + c.local.String()
		if c.incoming && !c.established {
			reason = "connection refused: closed by " + c.local.String()
		}
		c.sl.t.Send(wire.TReset, 0, c.id, []byte(reason))
		c.sl.remove(c)
	default:
		sendFin := !c.finSent
		c.finSent = true
		done := c.peerFin
		if !done {
			c.linger = time.AfterFunc(lingerTime, func() { c.abort("connection reset: closed by " + c.local.String() + " and not finished in time") })
		}
		c.mu.Unlock()
		if sendFin {
			c.sl.t.Send(wire.TFin, 0, c.id, nil)
		}
		if done {
			c.sl.remove(c)
		}
	}
	return nil
}

// abort resets the circuit toward the peer and fails it locally.
func (c *Circuit) abort(reason string) {
	c.fail(fmt.Errorf("%w: %s", ErrReset, reason))
	c.sl.t.Send(wire.TReset, 0, c.id, []byte(reason))
	c.sl.remove(c)
}

func (c *Circuit) stopTimersLocked() {
	for _, t := range []*time.Timer{c.rt, c.wt} {
		if t != nil {
			t.Stop()
		}
	}
}

// fail ends the circuit with err (the first error wins).
func (c *Circuit) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	if c.linger != nil {
		c.linger.Stop()
	}
	c.cond.Broadcast()
	c.mu.Unlock()
}

func (c *Circuit) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

func (c *Circuit) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl = c.setTimerLocked(&c.rt, t)
	return nil
}

func (c *Circuit) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wdl = c.setTimerLocked(&c.wt, t)
	return nil
}

func (c *Circuit) setTimerLocked(tp **time.Timer, t time.Time) time.Time {
	if *tp != nil {
		(*tp).Stop()
		*tp = nil
	}
	if !t.IsZero() {
		*tp = time.AfterFunc(time.Until(t), func() {
			c.mu.Lock()
			c.cond.Broadcast()
			c.mu.Unlock()
		})
	}
	c.cond.Broadcast()
	return t
}

// The session's reader calls these as frames arrive.

// onAccept: the target accepted (for a circuit we opened).
func (c *Circuit) onAccept(a *wire.Accept) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.incoming || c.established {
		return errors.New("unexpected accept")
	}
	c.established = true
	c.credit += int64(a.Window) - wire.InitialWindow
	c.epoch = monotime()
	c.pingLocked()
	c.cond.Broadcast()
	return nil
}

// onData buffers received bytes p, held in body (from wire.Frame.Keep)
// if that is not nil: the circuit then takes it over; an error means the
// peer broke the protocol and the circuit must be reset.
func (c *Circuit) onData(p []byte, body *[]byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if body != nil {
		defer func() {
			if body != nil { // not buffered
				wire.PutBody(body)
			}
		}()
	}
	switch {
	case c.err != nil:
		return nil
	case c.closed:
		return errors.New("connection reset: data after close at " + c.local.String())
	case c.peerFin:
		return errors.New("data after fin")
	case !c.incoming && !c.established:
		return errors.New("data before accept")
	}
	c.received += int64(len(p))
	if c.grantAt != 0 && c.received > c.grantOff {
		d := time.Duration(monotime() - c.grantAt)
		if c.loopRTT == 0 {
			c.loopRTT = d
		} else {
			c.loopRTT = (7*c.loopRTT + d) / 8
		}
		c.grantAt = 0
	}
	if c.received > c.granted {
		return fmt.Errorf("peer sent %d bytes beyond its window", c.received-c.granted)
	}
	if body != nil {
		c.rbuf.WriteKept(body, len(p))
		body = nil
	} else {
		c.rbuf.Write(p)
	}
	c.cond.Broadcast()
	return nil
}

// onWindow: the peer granted more.
func (c *Circuit) onWindow(n uint32) {
	c.mu.Lock()
	c.credit += int64(n)
	c.cond.Broadcast()
	c.mu.Unlock()
}

// onFin: the peer finished; true if both sides are done.
func (c *Circuit) onFin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.peerFin = true
	c.cond.Broadcast()
	if c.finSent && c.linger != nil {
		c.linger.Stop()
	}
	return c.finSent
}

// onReset: the peer or a hub aborted the circuit.
func (c *Circuit) onReset(f wire.Frame) {
	reason := strings.ToValidUTF8(string(f.Payload), "?")
	c.mu.Lock()
	established := c.established
	c.mu.Unlock()
	var err error
	switch {
	case f.Flags&wire.FlagHub != 0 && !established:
		err = fmt.Errorf("%w: %s", ErrUnreachable, reason)
	case !established && !c.incoming:
		err = &direct.RefusedError{What: direct.RefusedConnection, Peer: c.remote.ID, Reason: strings.TrimPrefix(reason, "connection refused: ")}
	default:
		err = fmt.Errorf("%w: %s", ErrReset, strings.TrimPrefix(reason, "connection reset: "))
	}
	c.fail(err)
}

// onPong: a round trip of the circuit.
func (c *Circuit) onPong(p []byte) {
	d := pingRTT(p)
	if d == 0 {
		return
	}
	c.mu.Lock()
	if c.rtt == 0 {
		c.rtt = d
	} else {
		c.rtt = (7*c.rtt + d) / 8
	}
	c.mu.Unlock()
}
