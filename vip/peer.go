package vip

import (
	"errors"
	"io"
	"net"
	"os"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/tun"
)

const (
	// maxBatch is the most packets written to a peer before a flush.
	maxBatch = 256
	// writeTimeout bounds one batch's write (half of it at least): a
	// peer that takes no bytes for this long is taken for dead (its
	// connection closed: another takes over, or it is dialed again).
	writeTimeout = 30 * time.Second
)

// peer is the sending side toward one node: its bounded queue, the
// connections to it (links, link.go: every one read, the best one sent
// on) and a goroutine (run) writing the queue to the best connection.
// When its last connection ends, a peer that had packets lately is
// dialed again and again (redialMin to redialMax apart) while its queue
// holds what comes meanwhile: an inner TCP whose retransmissions back off
// would otherwise lose each one to a dial that failed and wait ever
// longer (issue 35). A peer goes down when its last connection ends
// after redialIdle without packets, or when its first dial fails: its
// queue is dropped, and the next packet for the node makes a new peer
// (after dialRetry after a failed first dial).
type peer struct {
	n     *Network
	id    identity.ID
	c     *counters
	queue chan *pbuf
	done  chan struct{} // closed when down
	wake  chan struct{} // (capacity 1) the connection to send on changed

	// guarded by n.mu
	down     bool
	dialing  bool               // a dial goroutine runs
	wasUp    bool               // it had a connection: a lost one is dialed again
	lastSent time.Time          // when a packet was last queued for it
	replay   []*pbuf            // TCP segments to write again first on the next connection (replay.go)
	recent   recent             // the TCP segments last written on the main connection (its own lock)
	redials  uint64             // dials after its connections all ended
	until    time.Time          // down after a failed dial: packets dropped until then
	conn     net.Conn           // the connection sent on (the best link's); nil while dialing
	links    map[net.Conn]*link // every connection to the peer, conn's included
	since    time.Time          // when conn became the one sent on
	shortcut shortcutState      // the background tries of a more direct path (shortcut.go)
	// carriers are the more connections flows are hashed onto
	// (carrier.go); carrierMax is the most connections agreed with the
	// peer (0: not asked yet, 1: one); flowMask the flows seen since
	// flowSince.
	carriers       []*carrier
	carrierMax     int
	carrierDialing bool
	flowMask       uint64
	flowSince      time.Time
}

func (n *Network) countersLocked(id identity.ID) *counters {
	c := n.counters[id]
	if c == nil {
		c = &counters{icmpBack: newICMPLimiter(), srcs: newSources(n, id)}
		n.counters[id] = c
	}
	return c
}

// newPeerLocked makes the peer id and starts its writer; a dial or
// Accept gives it its first connection.
func (n *Network) newPeerLocked(id identity.ID) *peer {
	p := &peer{
		n: n, id: id, c: n.countersLocked(id),
		queue: make(chan *pbuf, n.queueLen),
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
	n.dialLocked(p)
	return p
}

// enqueueLocked queues pkt for the peer, or drops it when the queue is
// full or the peer down: it never waits.
func (p *peer) enqueueLocked(pkt *pbuf) {
	if p.down {
		pkt.release()
		p.n.drop(dropNoConnection, "")
		return
	}
	p.shortcut.activeLocked(p)
	p.lastSent = time.Now()
	q := p.queue
	if pkt.flow != 0 {
		if k := len(p.carriers); k > 0 {
			if i := carrierIndex(pkt.flow, k); i > 0 {
				q = p.carriers[i-1].queue
			}
		}
		p.noteFlowLocked(pkt.flow, time.Now())
	}
	select {
	case q <- pkt:
	default:
		pkt.release()
		p.c.queueFull.Add(1)
		p.n.drop(dropQueueFull, "packets to a peer whose queue is full", "peer", p.id.Short())
	}
}

// run writes the peer's queue to the connection it sends on, in
// batches, until the peer goes down. When that connection changes (a
// better one came up, or it ended and another is left), the packets
// still queued go on the new one: a switch loses none.
func (p *peer) run() {
	n := p.n
	defer n.wg.Done()
	var cur net.Conn
	var w frameWriter
	batch := make([]*pbuf, 0, maxBatch)
	for {
		n.mu.Lock()
		c, down := p.conn, p.down
		var replay []*pbuf
		if c != nil {
			replay, p.replay = p.replay, nil
		}
		n.mu.Unlock()
		if down {
			for _, pkt := range replay {
				pkt.release()
			}
			return
		}
		cur = c
		if len(replay) > 0 {
			count := len(replay)
			if err := p.writeOut(&w, cur, replay, true); err != nil {
				n.linkEnded(p, cur, err)
			} else {
				p.c.replayed.Add(uint64(count))
			}
			continue
		}
		var pkt *pbuf
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
		if err := p.writeBatch(&w, cur, p.queue, pkt, batch, true); err != nil {
			n.linkEnded(p, cur, err) // another link takes over, or the peer goes down
		}
	}
}

// writeBatch writes first and what else queue holds (maxBatch packets
// at most) to c in one batch (writeOut). main: c is the peer's main
// connection, whose TCP segments are kept for a replay.
func (p *peer) writeBatch(w *frameWriter, c net.Conn, queue chan *pbuf, first *pbuf, batch []*pbuf, main bool) error {
	batch = append(batch[:0], first)
gather:
	for len(batch) < maxBatch {
		select {
		case pkt := <-queue:
			batch = append(batch, pkt)
		default:
			break gather
		}
	}
	err := p.writeOut(w, c, batch, main)
	clear(batch)
	return err
}

// writeOut writes batch to c and counts it: sent, or lost with the
// connection when the write fails. The packets go back to their pools,
// but, on the main connection, the TCP segments kept for a replay.
func (p *peer) writeOut(w *frameWriter, c net.Conn, batch []*pbuf, main bool) error {
	// A batch has writeTimeout/2 at least: the deadline is moved (a
	// timer reset, each time) only once half of it is gone.
	if now := time.Now(); c != w.dlConn || w.deadline.Sub(now) < writeTimeout/2 {
		w.dlConn, w.deadline = c, now.Add(writeTimeout)
		c.SetWriteDeadline(w.deadline)
	}
	bytes := 0
	for _, pkt := range batch {
		bytes += pkt.n
	}
	err := w.write(c, batch)
	for _, pkt := range batch {
		if err == nil && main && pkt.tcp {
			p.recent.add(pkt)
		} else {
			pkt.release()
		}
	}
	if err != nil {
		p.c.connLost.Add(uint64(len(batch)))
		p.n.drops[dropConnLost].Add(uint64(len(batch)))
		return err
	}
	p.c.sentPackets.Add(uint64(len(batch)))
	p.c.sentBytes.Add(uint64(bytes))
	return nil
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
	queues := []chan *pbuf{p.queue}
	for _, c := range p.carriers {
		close(c.done)
		queues = append(queues, c.queue)
	}
	p.carriers = nil
	n.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	p.dropReplay()
	lost := 0
	for _, q := range queues {
		for drained := false; !drained; {
			select {
			case pkt := <-q:
				pkt.release()
				lost++
			default:
				drained = true
			}
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
	r := newFrameReader(conn, readBuffer)
	bs := n.dev.BatchSize()
	bufs := make([][]byte, bs)
	batch := make([][]byte, 0, bs)
	srcs := p.c.srcs
	for {
		batch = batch[:0]
		frames := 0
		for len(batch) < bs {
			i := len(batch)
			var size int
			bufs[i], size, err = r.readFrame(bufs[i], tun.Offset)
			if err != nil {
				break
			}
			frames++
			if n.inbound(p, l, srcs, bufs[i][tun.Offset:tun.Offset+size]) {
				batch = append(batch, bufs[i][:tun.Offset+size])
			}
			if !r.ready() {
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
// peer in srcs), no larger than the device takes.
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
