package hub

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gridlink/gridlink/wire"
)

// ErrClosedByPeer is why a trunk closed when its peer closed the
// connection (end of stream).
var ErrClosedByPeer = errors.New("closed by peer")

// epoch anchors monotonic timestamps (ping payloads, last-heard times).
var epoch = time.Now()

func monotime() int64 { return int64(time.Since(epoch)) }

const (
	// tunnelLinger is how long the writer of a trunk that runs through an
	// ssh tunnel whose sshd keeps Nagle's algorithm on (direct.Nagle: it
	// would not run a command for us) waits before writing a small batch,
	// so that frames sent moments apart (an open and the handshake
	// pipelined behind it, an accept and the first answer) leave together:
	// there a second small packet sent while the first is unacknowledged
	// waits a whole round trip.
	tunnelLinger = 2 * time.Millisecond
	// lingerBelow is the batch size below which a tunnel trunk lingers.
	lingerBelow = 4096
	// writerLinger is how long an idle trunk's writer goroutine waits for
	// more frames before it exits (and releases its buffers); the next
	// frame starts a new one. Idle trunks thus hold no writer at all.
	writerLinger = 250 * time.Millisecond
	// writeTimeout closes a trunk whose peer stops reading.
	writeTimeout = 30 * time.Second
)

// MaxData is the largest data payload a circuit's end sends (it accepts
// up to wire.MaxPayload).
const MaxData = 64 << 10

// HandshakeTimeout bounds the TLS handshake and the hello exchange of a
// trunk.
const HandshakeTimeout = 15 * time.Second

// Trunk is one connection carrying wire frames, hub to hub or node to hub,
// after its handshake (see Secure): control frames sealed, data frames as
// they are. Sending never blocks: frames are appended to a queue that a
// writer goroutine (started on demand) flushes in batches. The owner runs
// ReadLoop.
type Trunk struct {
	conn   net.Conn     // TCP or an ssh tunnel: closing it tears the trunk down
	sealer *wire.Sealer // nil: frames unsealed (only tests drive trunks so, over pipes)
	remote netip.AddrPort
	desc   string // for messages: "hub das3v (192.0.2.10:7946)"
	tunnel bool   // runs through an sshd that delays small writes: coalesce them (tunnelLinger)

	qmu     sync.Mutex
	q       []qbuf // encoded frames waiting for the writer, in blocks and kept payloads (trunk_kept.go)
	qlen    int
	scratch []byte // for sealing
	writing bool   // a writer goroutine exists
	idle    bool   // ... and waits on wake
	wake    chan struct{}
	closed  bool
	refs    uint64    // payloads queued by reference (SendRef), in all
	freed   uint64    // of those, the ones the writer is done with
	freedC  sync.Cond // on qmu: freed grew

	done     chan struct{}
	errOnce  sync.Once
	err      error
	lastRecv atomic.Int64  // monotime of the last frame received, or of the end of its handling
	heard    atomic.Uint64 // frames received (Answers)
	handling atomic.Bool   // the reader is handling a frame, not waiting for one
	rtt      atomic.Int64  // ns, 0 until measured
	rttMu    sync.Mutex
	samples  [rttSamples]time.Duration
	nsamples int
	lowest   time.Duration // the smallest round trip ever measured
	lastPing atomic.Int64  // monotime of the last ping sent

	// control, if set (CountControl), adds the bytes of every trunk-level
	// frame queued: control messages and the trunk's own pings and pongs
	// (circuit 0), sealed, header included; not circuit frames.
	control *atomic.Uint64
}

// CountControl makes the trunk add the bytes of the trunk-level frames
// it sends (control messages, the trunk's pings and pongs) to c. Call it
// before the trunk is used.
func (l *Trunk) CountControl(c *atomic.Uint64) { l.control = c }

// NewTrunk starts a trunk on conn after its handshake and hellos. sealer
// seals its control frames (nil: unsealed, for tests over pipes); desc
// names it in messages ("hub das3v (192.0.2.10:7946)"); tunnel says it
// runs through an sshd that delays small writes, so its writer coalesces
// them.
func NewTrunk(conn net.Conn, sealer *wire.Sealer, desc string, tunnel bool) *Trunk {
	l := &Trunk{conn: conn, sealer: sealer, desc: desc, tunnel: tunnel, wake: make(chan struct{}, 1), done: make(chan struct{})}
	l.freedC.L = &l.qmu
	l.remote = AddrPort(conn.RemoteAddr())
	l.lastRecv.Store(monotime())
	return l
}

// Remote is the peer's address.
func (l *Trunk) Remote() netip.AddrPort { return l.remote }

// Desc names the trunk in messages: "hub das3v (192.0.2.10:7946)".
func (l *Trunk) Desc() string { return l.desc }

// Done is closed once the trunk is closed.
func (l *Trunk) Done() <-chan struct{} { return l.done }

// Conn is the connection under the trunk (closing it tears the trunk
// down as a failure would).
func (l *Trunk) Conn() net.Conn { return l.conn }

// AddrPort is a net.Addr's address and port, IPv4 unmapped.
func AddrPort(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case nil:
		return netip.AddrPort{}
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

// Send queues a frame; false if the trunk is closed. The payload is copied.
// Frames are sealed here, under the queue's lock, so that they go on the
// wire in the order of their nonces.
func (l *Trunk) Send(t wire.Type, flags uint8, circuit uint32, payload []byte) bool {
	l.qmu.Lock()
	if l.closed {
		l.qmu.Unlock()
		return false
	}
	if l.sealer != nil && t != wire.TData {
		l.scratch = l.sealer.Append(l.scratch[:0], t, flags, circuit, payload)
		if l.control != nil && circuit == 0 {
			l.control.Add(uint64(len(l.scratch)))
		}
		l.appendLocked(l.scratch, true)
		if cap(l.scratch) > 4<<10 {
			l.scratch = nil // a rare big control message: do not keep its buffer
		}
	} else {
		var h [wire.HeaderSize]byte
		wire.PutHeaderFlags(h[:], t, flags, circuit, len(payload))
		if l.control != nil && circuit == 0 {
			l.control.Add(uint64(len(h) + len(payload)))
		}
		l.appendLocked(h[:], false)
		l.appendLocked(payload, false)
	}
	l.kickLocked()
	l.qmu.Unlock()
	return true
}

// appendLocked copies p to the end of the queue, in pooled blocks (frames
// may span blocks: the writer sends a byte stream). A small sealed frame
// (sealed: a ping, a pong, a control message) into an empty queue takes
// a small block of its own instead: a hub pings thousands of idle nodes'
// trunks at once, and a pooled 64 KiB block each had a hub of 2,000 idle
// nodes hold 43 MiB of blocks, 22 KiB a node (make scale's heap profile).
func (l *Trunk) appendLocked(p []byte, sealed bool) {
	for len(p) > 0 {
		n := len(l.q)
		if n == 0 && sealed && len(p) <= smallBlock {
			l.q = append(l.q, qbuf{b: make(block, 0, smallBlock)})
			n++
		} else if n == 0 || !l.q[n-1].block() || len(l.q[n-1].b) == cap(l.q[n-1].b) {
			l.q = append(l.q, qbuf{b: (*blockPool.Get().(*block))[:0]})
			n++
		}
		b := l.q[n-1].b
		k := copy(b[len(b):cap(b)], p)
		l.q[n-1].b = b[:len(b)+k]
		l.qlen += k
		p = p[k:]
	}
}

// blockSize is the unit of trunk queues.
const blockSize = 64 << 10

type block = []byte

var blockPool = sync.Pool{New: func() any { b := make(block, 0, blockSize); return &b }}

// smallBlock is the size of a queue's first block for a small sealed
// frame (appendLocked); such blocks are not pooled.
const smallBlock = 512

func putBlock(b block) {
	if cap(b) != blockSize {
		return // a small block (appendLocked): the garbage collector's
	}
	b = b[:0]
	blockPool.Put(&b)
}

// SendControl queues a control message.
func (l *Trunk) SendControl(m *wire.Message) bool {
	return l.Send(wire.TControl, 0, 0, wire.Encode(m))
}

func (l *Trunk) kickLocked() {
	switch {
	case !l.writing:
		l.writing = true
		go l.writeLoop()
	case l.idle:
		l.idle = false
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// Queued is the number of bytes waiting to be written.
func (l *Trunk) Queued() int {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	return l.qlen
}

func (l *Trunk) writeLoop() {
	var batch []qbuf
	var wbufs [][]byte
	var timer *time.Timer
	var written uint64 // refs up to this one are written
	for {
		l.qmu.Lock()
		l.freeLocked(written)
		for len(l.q) == 0 && !l.closed {
			l.idle = true
			l.qmu.Unlock()
			if timer == nil {
				timer = time.NewTimer(writerLinger)
			} else {
				timer.Reset(writerLinger)
			}
			expired := false
			select {
			case <-l.wake:
				timer.Stop()
			case <-timer.C:
				expired = true
			}
			l.qmu.Lock()
			if expired && len(l.q) == 0 {
				l.freeLocked(l.refs)
				l.writing, l.idle = false, false
				l.q = nil
				l.scratch = nil // an idle trunk keeps no sealing buffer either
				l.qmu.Unlock()
				return
			}
		}
		l.idle = false
		if l.closed {
			l.freeLocked(l.refs)
			l.writing = false
			l.qmu.Unlock()
			return
		}
		if l.tunnel && l.qlen < lingerBelow {
			l.qmu.Unlock()
			time.Sleep(tunnelLinger)
			l.qmu.Lock()
		}
		batch, l.q = l.q, batch[:0]
		l.qlen = 0
		written = l.refs
		l.qmu.Unlock()
		_ = l.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		// one writev for the batch, on TCP. WriteTo consumes the slices it
		// is given: give it copies of the block headers, not the blocks.
		wbufs = wbufs[:0]
		for _, e := range batch {
			wbufs = append(wbufs, e.b)
		}
		bufs := net.Buffers(wbufs)
		_, err := bufs.WriteTo(l.conn)
		clear(wbufs)
		for _, e := range batch {
			e.release()
		}
		clear(batch)
		if err != nil {
			l.Close(fmt.Errorf("write: %w", err))
			l.qmu.Lock()
			l.freeLocked(l.refs)
			l.writing = false
			l.qmu.Unlock()
			return
		}
	}
}

// Close tears the trunk down once; err says why (nil: a clean local close).
func (l *Trunk) Close(err error) {
	l.errOnce.Do(func() {
		if err == nil {
			err = net.ErrClosed
		}
		l.err = err
		l.qmu.Lock()
		l.closed = true
		for _, e := range l.q {
			e.release()
		}
		l.q, l.qlen = nil, 0
		if l.idle {
			select {
			case l.wake <- struct{}{}:
			default:
			}
		}
		l.qmu.Unlock()
		close(l.done) // before the socket, so the reader sees why it fails
		_ = l.conn.Close()
	})
}

// Mute drops what is queued and makes send refuse from now on, without
// closing the connection (a vanishing hub's first step).
func (l *Trunk) Mute() {
	l.qmu.Lock()
	l.closed = true
	for _, e := range l.q {
		e.release()
	}
	l.q, l.qlen = nil, 0
	l.qmu.Unlock()
}

// CloseAfterFlush closes the trunk once the queue drained (or after d).
func (l *Trunk) CloseAfterFlush(d time.Duration, err error) {
	go func() {
		deadline := time.Now().Add(d)
		for l.Queued() > 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond) // let the writer finish its last batch
		l.Close(err)
	}()
}

// Cause is why the trunk closed.
func (l *Trunk) Cause() error {
	<-l.done
	return l.err
}

func (l *Trunk) IsClosed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// rttSamples is how many recent round trips MinRTT looks at.
const rttSamples = 8

// addSample records a measured round trip.
func (l *Trunk) addSample(d time.Duration) {
	l.rttMu.Lock()
	l.samples[l.nsamples%rttSamples] = d
	l.nsamples++
	if l.lowest == 0 || d < l.lowest {
		l.lowest = d
	}
	l.rttMu.Unlock()
}

// LowestRTT is the smallest round trip measured on the trunk since it
// began, 0 before the first: its propagation delay, which a connection's
// path keeps. Unlike MinRTT it only ever falls, so a hub's route costs do
// not follow the queueing of a loaded moment up and down (on make scale's
// 100 hubs, MinRTT's changes kept next hops and hop counts moving, and
// every move was a routing update to send).
func (l *Trunk) LowestRTT() time.Duration {
	l.rttMu.Lock()
	defer l.rttMu.Unlock()
	return l.lowest
}

// MinRTT is the smallest of the last rttSamples round trips, 0 before the
// first: the trunk's propagation delay without the queueing and scheduling
// delays of a busy moment, which is what route selection should compare
// (a smoothed RTT lets one busy second send routes the long way round).
func (l *Trunk) MinRTT() time.Duration {
	l.rttMu.Lock()
	defer l.rttMu.Unlock()
	var m time.Duration
	for _, d := range l.samples[:min(l.nsamples, rttSamples)] {
		if m == 0 || d < m {
			m = d
		}
	}
	return m
}

// Ping sends a trunk ping carrying the send time.
func (l *Trunk) Ping() {
	now := monotime()
	l.lastPing.Store(now)
	var p [8]byte
	binary.BigEndian.PutUint64(p[:], uint64(now))
	l.Send(wire.TPing, 0, 0, p[:])
}

// pingRTT returns the round trip a pong payload proves, or 0 if the
// payload is not a plausible timestamp of ours.
func pingRTT(p []byte) time.Duration {
	sent := int64(binary.BigEndian.Uint64(p))
	now := monotime()
	if sent <= 0 || sent > now || now-sent > int64(time.Minute) {
		return 0
	}
	return time.Duration(max(now-sent, 1))
}

// RTT is the smoothed round trip of trunk pings, 0 until measured.
func (l *Trunk) RTT() time.Duration { return time.Duration(l.rtt.Load()) }

// SilentFor is how long nothing was heard from the peer: 0 while the
// reader handles a frame, and the time it took does not count, since a
// frame waiting behind a slow one was not the peer's silence (a hub
// busy applying a neighbour's table had its trunks to others closed
// for silence: make scale, issue 23).
func (l *Trunk) SilentFor() time.Duration {
	if l.handling.Load() {
		return 0
	}
	return time.Duration(monotime() - l.lastRecv.Load())
}

// ReadLoop reads frames until the trunk fails, answering trunk pings and
// measuring trunk pongs itself and passing every other frame to handle. A
// non-nil error from handle closes the trunk with that error.
func (l *Trunk) ReadLoop(r *wire.Reader, handle func(wire.Frame) error) error {
	for {
		f, err := r.Read()
		if err != nil {
			if l.IsClosed() {
				return l.err
			}
			if errors.Is(err, io.EOF) {
				err = ErrClosedByPeer
			} else if !errors.Is(err, wire.ErrFrame) {
				err = fmt.Errorf("read: %w", err)
			}
			l.Close(err)
			return err
		}
		l.lastRecv.Store(monotime())
		l.heard.Add(1)
		if f.Circuit == 0 {
			switch f.Type {
			case wire.TPing:
				l.Send(wire.TPong, 0, 0, f.Payload)
				continue
			case wire.TPong:
				if d := pingRTT(f.Payload); d > 0 {
					l.addSample(d)
					old := l.rtt.Load()
					if old == 0 {
						l.rtt.Store(int64(d))
					} else {
						l.rtt.Store((7*old + int64(d)) / 8)
					}
				}
				continue
			}
		}
		l.handling.Store(true)
		err = handle(f)
		l.lastRecv.Store(monotime())
		l.handling.Store(false)
		if err != nil {
			l.Close(err)
			return err
		}
	}
}

// Keepalive of a node's trunk, on both ends.
const (
	// NodePingEvery is how often a hub pings an attached node (and a
	// session its hub); nodes are many, so less often than hubs.
	NodePingEvery = 5 * time.Second
	// NodeSilence closes a node's trunk (either end) when nothing was
	// heard for that long.
	NodeSilence = 4 * NodePingEvery
)

// SilentError closes a trunk from which nothing was heard for too long.
type SilentError struct{ For time.Duration }

func (e *SilentError) Error() string { return "nothing heard for " + e.For.String() }

// Answers pings the peer and reports whether any frame comes from it
// within wait (a pong, or anything else it sends meanwhile): false once
// wait passed in silence or the trunk closed. A hub asks it of a node's
// trunk before it lets another process with the node's identity take its
// place (package hubserver, wire/instance.go).
func (l *Trunk) Answers(wait time.Duration) bool {
	before := l.heard.Load()
	l.Ping()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(answerPoll)
	defer tick.Stop()
	for {
		if l.heard.Load() != before {
			return true
		}
		select {
		case <-l.done:
			return false
		case <-deadline.C:
			return l.heard.Load() != before
		case <-tick.C:
		}
	}
}

// answerPoll is how often Answers looks for a frame heard.
const answerPoll = 10 * time.Millisecond

// SincePing is how long ago the last trunk ping was sent.
func (l *Trunk) SincePing() time.Duration { return time.Duration(monotime() - l.lastPing.Load()) }
