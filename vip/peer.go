package vip

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/time/rate"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/tun"
)

const (
	// maxBatch is the most packets written to a peer before a flush.
	maxBatch = 256
	// writeTimeout bounds one flush: a peer that takes no bytes for this
	// long is taken for dead (its queue dropped, the next packet dials
	// again).
	writeTimeout = 30 * time.Second
)

// peer is the sending side toward one node: its bounded queue, the
// connections to it (links, link.go: every one read, the best one sent
// on) and a goroutine (run) writing the queue to the best connection.
// A peer goes down when its last connection ends (or none could be
// made): its queue is dropped, and the next packet for the node makes a
// new peer, at once after a lost connection, after dialRetry after a
// failed dial.
type peer struct {
	n     *Network
	id    identity.ID
	c     *counters
	queue chan []byte
	done  chan struct{} // closed when down
	wake  chan struct{} // (capacity 1) the connection to send on changed

	// guarded by n.mu
	down     bool
	until    time.Time          // down after a failed dial: packets dropped until then
	conn     net.Conn           // the connection sent on (the best link's); nil while dialing
	links    map[net.Conn]*link // every connection to the peer, conn's included
	since    time.Time          // when conn became the one sent on
	shortcut shortcutState      // the background tries of a more direct path (shortcut.go)
}

func (n *Network) countersLocked(id identity.ID) *counters {
	c := n.counters[id]
	if c == nil {
		c = &counters{icmpBack: newICMPLimiter()}
		n.counters[id] = c
	}
	return c
}

// newPeerLocked makes the peer id and starts its writer; a dial or
// Accept gives it its first connection.
func (n *Network) newPeerLocked(id identity.ID) *peer {
	p := &peer{
		n: n, id: id, c: n.countersLocked(id),
		queue: make(chan []byte, n.queueLen),
		done:  make(chan struct{}),
		wake:  make(chan struct{}, 1),
		links: map[net.Conn]*link{},
	}
	n.peers[id] = p
	n.wg.Add(1)
	go p.run()
	return p
}

// peerLocked returns the peer id, starting a dial when there is none.
func (n *Network) peerLocked(id identity.ID) *peer {
	p := n.peers[id]
	if p != nil && (!p.down || time.Now().Before(p.until)) {
		return p
	}
	p = n.newPeerLocked(id)
	n.wg.Add(1)
	go n.dial(p)
	return p
}

// enqueueLocked queues pkt for the peer, or drops it when the queue is
// full or the peer down: it never waits.
func (p *peer) enqueueLocked(pkt []byte) {
	if p.down {
		p.n.drop(dropNoConnection, "")
		return
	}
	p.shortcut.activeLocked(p)
	select {
	case p.queue <- pkt:
	default:
		release(pkt)
		p.c.queueFull.Add(1)
		p.n.drop(dropQueueFull, "packets to a peer whose queue is full", "peer", p.id.Short())
	}
}

// dial opens the first connection to the peer.
func (n *Network) dial(p *peer) {
	defer n.wg.Done()
	ctx, cancel := context.WithTimeout(n.ctx, dialTimeout)
	c, err := n.cfg.Dialer.DialPeer(ctx, p.id)
	cancel()
	n.mu.Lock()
	if err != nil {
		accepted := len(p.links) > 0 // the peer dialed this node meanwhile
		n.mu.Unlock()
		if n.quiet.Allow("dial") {
			n.log.Warn("vip: dialing a peer", "peer", p.id.Short(), "err", err)
		}
		if !accepted {
			n.peerDown(p, dialRetry, err)
		}
		return
	}
	if n.closed || p.down {
		n.mu.Unlock()
		c.Close()
		n.peerDown(p, 0, ErrClosed)
		return
	}
	n.addLinkLocked(p, c, n.cfg.ID)
	n.mu.Unlock()
}

// run writes the peer's queue to the connection it sends on, in
// batches, until the peer goes down. When that connection changes (a
// better one came up, or it ended and another is left), the packets
// still queued go on the new one: a switch loses none.
func (p *peer) run() {
	n := p.n
	defer n.wg.Done()
	var cur net.Conn
	w := bufio.NewWriterSize(nil, writeBuffer)
	for {
		n.mu.Lock()
		c, down := p.conn, p.down
		n.mu.Unlock()
		if down {
			return
		}
		if c != cur {
			cur = c
			w.Reset(c) // empty: every batch was flushed
		}
		var pkt []byte
		if cur == nil { // dialing
			select {
			case <-p.done:
				return
			case <-n.ctx.Done():
				n.peerDown(p, 0, ErrClosed)
				return
			case <-p.wake:
				continue
			}
		}
		select {
		case <-p.done:
			return
		case <-n.ctx.Done():
			n.peerDown(p, 0, ErrClosed)
			return
		case <-p.wake:
			continue
		case pkt = <-p.queue:
		}
		cur.SetWriteDeadline(time.Now().Add(writeTimeout)) // for the whole batch (bufio writes when full)
		pkts, bytes := 0, 0
		for {
			writeFrame(w, pkt) // its error is Flush's too
			pkts++
			bytes += len(pkt)
			release(pkt) // w copied it, or wrote it out
			if pkts == maxBatch {
				break
			}
			select {
			case pkt = <-p.queue:
				continue
			default:
			}
			break
		}
		if err := w.Flush(); err != nil {
			p.c.connLost.Add(uint64(pkts))
			n.drops[dropConnLost].Add(uint64(pkts))
			n.linkEnded(p, cur, err) // another link takes over, or the peer goes down
			continue
		}
		p.c.sentPackets.Add(uint64(pkts))
		p.c.sentBytes.Add(uint64(bytes))
	}
}

// peerDown takes p down: its connections closed, its queue dropped and
// counted. After a failed dial (hold > 0) it stays in place that long,
// dropping what is sent to it.
func (n *Network) peerDown(p *peer, hold time.Duration, why error) {
	n.mu.Lock()
	if p.down {
		n.mu.Unlock()
		return
	}
	p.down = true
	close(p.done)
	if hold > 0 {
		p.until = time.Now().Add(hold)
	} else if n.peers[p.id] == p {
		delete(n.peers, p.id)
	}
	conns := make([]net.Conn, 0, len(p.links))
	for c, l := range p.links {
		l.stopRetire()
		conns = append(conns, c)
	}
	n.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	lost := 0
	for drained := false; !drained; {
		select {
		case <-p.queue:
			lost++
		default:
			drained = true
		}
	}
	if hold > 0 { // never connected
		n.drops[dropNoConnection].Add(uint64(lost))
	} else {
		p.c.connLost.Add(uint64(lost))
		n.drops[dropConnLost].Add(uint64(lost))
	}
	if n.ctx.Err() == nil && n.quiet.Allow("peer down") {
		n.log.Info("vip: peer connection ended", "peer", p.id.Short(), "queued_dropped", lost, "err", why)
	}
}

// receive reads the packets the peer sends on the link l, checks them
// and writes them to the device in batches: the packets its read buffer
// holds whole go in one Write. When l ends, another link of the peer
// takes over its sending, or the peer goes down.
func (n *Network) receive(p *peer, l *link) {
	defer n.wg.Done()
	conn, id := l.conn, p.id
	var err error
	defer func() {
		conn.Close()
		n.linkEnded(p, conn, err)
	}()
	r := bufio.NewReaderSize(conn, readBuffer)
	bs := n.dev.BatchSize()
	bufs := make([][]byte, bs)
	batch := make([][]byte, 0, bs)
	srcs := &sources{n: n, id: id, m: map[netip.Addr]*sourceAnswer{}, lookups: rate.NewLimiter(sourceLookupRate, sourceLookupBurst)}
	for {
		batch = batch[:0]
		frames := 0
		for len(batch) < bs {
			i := len(batch)
			var size int
			bufs[i], size, err = readFrame(r, bufs[i], tun.Offset)
			if err != nil {
				break
			}
			frames++
			if n.inbound(p, l, srcs, bufs[i][tun.Offset:tun.Offset+size]) {
				batch = append(batch, bufs[i][:tun.Offset+size])
			}
			if !frameReady(r) {
				break
			}
		}
		if frames > 0 {
			l.lastRecv.Store(time.Now().UnixNano())
		}
		n.writeDevice(batch)
		if err != nil {
			if errors.Is(err, ErrBadFrame) {
				p.c.malformed.Add(1)
				n.drop(dropMalformed, "a peer's connection: it sent a bad frame", "peer", id.Short(), "err", err)
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.ErrClosedPipe) && !errors.Is(err, os.ErrClosed) && n.quiet.Allow("peer read") {
				n.log.Info("vip: reading a peer's connection", "peer", id.Short(), "err", err)
			}
			return
		}
	}
}

// inbound checks a packet the peer sent on l: well-formed, to this node,
// from the peer's own address (the directory's word, remembered per
// connection in srcs), no larger than the device takes.
func (n *Network) inbound(p *peer, l *link, srcs *sources, pkt []byte) bool {
	id, c := p.id, p.c
	h, err := Parse(pkt)
	switch {
	case err != nil:
		c.malformed.Add(1)
		n.drop(dropMalformed, "a malformed packet from a peer", "peer", id.Short(), "err", err)
		return false
	case !n.ours(h.Dst):
		c.notForUs.Add(1)
		n.drop(dropNotForUs, "a packet from a peer to an address not this node's", "peer", id.Short(), "dst", h.Dst)
		return false
	case !srcs.check(h.Src):
		c.spoofed.Add(1)
		n.drop(dropSpoofedSource, "a packet from a peer whose source is not its address", "peer", id.Short(), "src", h.Src, "dst", h.Dst)
		return false
	case !n.admit(p, l, h, pkt):
		return false
	case len(pkt) > int(n.devMTU.Load()):
		// A peer whose tunnel MTU is larger: told this node's, over the
		// tunnel, as a router on the path would (never a silent drop).
		mtu := int(n.devMTU.Load())
		c.tooBig.Add(1)
		n.drop(dropTooBig, "a packet from a peer larger than the device MTU", "peer", id.Short(), "len", len(pkt), "mtu", mtu)
		n.sendBack(p, icmpTooBig(h, pkt, mtu))
		return false
	}
	n.noteRefusal(p, h, pkt)
	c.recvPackets.Add(1)
	c.recvBytes.Add(uint64(len(pkt)))
	return true
}
