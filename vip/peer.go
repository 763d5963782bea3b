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

// peer is the sending side toward one node: its bounded queue and the
// connection a goroutine (run) writes the queue to. A peer that goes down
// (its connection ended, or could not be made) drops its queue; the next
// packet for the node makes a new peer, at once after a lost connection,
// after dialRetry after a failed dial.
type peer struct {
	n     *Network
	id    identity.ID
	c     *counters
	queue chan []byte
	done  chan struct{} // closed when down

	// guarded by n.mu
	down  bool
	until time.Time // down after a failed dial: packets dropped until then
	conn  net.Conn  // the connection sent on; nil while dialing
}

func (n *Network) countersLocked(id identity.ID) *counters {
	c := n.counters[id]
	if c == nil {
		c = &counters{}
		n.counters[id] = c
	}
	return c
}

func (n *Network) newPeerLocked(id identity.ID) *peer {
	p := &peer{n: n, id: id, c: n.countersLocked(id), queue: make(chan []byte, n.queueLen), done: make(chan struct{})}
	n.peers[id] = p
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
	go p.run(nil)
	return p
}

// enqueueLocked queues pkt for the peer, or drops it when the queue is
// full or the peer down: it never waits.
func (p *peer) enqueueLocked(pkt []byte) {
	if p.down {
		p.n.drop(dropNoConnection, "")
		return
	}
	select {
	case p.queue <- pkt:
	default:
		release(pkt)
		p.c.queueFull.Add(1)
		p.n.drop(dropQueueFull, "packets to a peer whose queue is full", "peer", p.id.Short())
	}
}

// run dials the peer when conn is nil, then writes its queue to the
// connection in batches until the peer goes down.
func (p *peer) run(conn net.Conn) {
	n := p.n
	defer n.wg.Done()
	if conn == nil {
		ctx, cancel := context.WithTimeout(n.ctx, dialTimeout)
		c, err := n.cfg.Dialer.DialPeer(ctx, p.id)
		cancel()
		if err != nil {
			if n.quiet.Allow("dial") {
				n.log.Warn("vip: dialing a peer", "peer", p.id.Short(), "err", err)
			}
			n.peerDown(p, dialRetry, err)
			return
		}
		n.mu.Lock()
		if n.closed || p.down {
			n.mu.Unlock()
			c.Close()
			n.peerDown(p, 0, ErrClosed)
			return
		}
		n.conns[c] = struct{}{}
		p.conn = c
		n.wg.Add(1)
		go n.receive(c, p.id, p)
		n.mu.Unlock()
		conn = c
	}
	w := bufio.NewWriterSize(conn, writeBuffer)
	for {
		var pkt []byte
		select {
		case <-p.done:
			return
		case <-n.ctx.Done():
			n.peerDown(p, 0, ErrClosed)
			return
		case pkt = <-p.queue:
		}
		conn.SetWriteDeadline(time.Now().Add(writeTimeout)) // for the whole batch (bufio writes when full)
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
			n.peerDown(p, 0, err)
			return
		}
		p.c.sentPackets.Add(uint64(pkts))
		p.c.sentBytes.Add(uint64(bytes))
	}
}

// peerDown takes p down: its connection closed, its queue dropped and
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
	conn := p.conn
	n.mu.Unlock()
	if conn != nil {
		conn.Close()
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

// receive reads the packets the peer id sends on conn, checks them and
// writes them to the device in batches: the packets its read buffer holds
// whole go in one Write. When conn is the one p sends on, p goes down
// with it.
func (n *Network) receive(conn net.Conn, id identity.ID, p *peer) {
	defer n.wg.Done()
	n.mu.Lock()
	c := n.countersLocked(id)
	n.mu.Unlock()
	var err error
	defer func() {
		conn.Close()
		n.mu.Lock()
		delete(n.conns, conn)
		mine := p.conn == conn
		n.mu.Unlock()
		if mine {
			n.peerDown(p, 0, err)
		}
	}()
	r := bufio.NewReaderSize(conn, readBuffer)
	bs := n.dev.BatchSize()
	bufs := make([][]byte, bs)
	batch := make([][]byte, 0, bs)
	srcs := &sources{n: n, id: id, m: map[netip.Addr]*sourceAnswer{}, lookups: rate.NewLimiter(sourceLookupRate, sourceLookupBurst)}
	for {
		batch = batch[:0]
		for len(batch) < bs {
			i := len(batch)
			var size int
			bufs[i], size, err = readFrame(r, bufs[i], tun.Offset)
			if err != nil {
				break
			}
			if n.inbound(id, c, srcs, bufs[i][tun.Offset:tun.Offset+size]) {
				batch = append(batch, bufs[i][:tun.Offset+size])
			}
			if !frameReady(r) {
				break
			}
		}
		n.writeDevice(batch)
		if err != nil {
			if errors.Is(err, ErrBadFrame) {
				n.drop(dropMalformed, "a peer's connection: it sent a bad frame", "peer", id.Short(), "err", err)
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.ErrClosedPipe) && !errors.Is(err, os.ErrClosed) && n.quiet.Allow("peer read") {
				n.log.Info("vip: reading a peer's connection", "peer", id.Short(), "err", err)
			}
			return
		}
	}
}

// inbound checks a packet the peer id sent: well-formed, to this node,
// from the peer's own address (the directory's word, remembered per
// connection in srcs), no larger than the device takes.
func (n *Network) inbound(id identity.ID, c *counters, srcs *sources, pkt []byte) bool {
	h, err := Parse(pkt)
	switch {
	case err != nil:
		n.drop(dropMalformed, "a malformed packet from a peer", "peer", id.Short(), "err", err)
		return false
	case !n.ours(h.Dst):
		n.drop(dropNotForUs, "a packet from a peer to an address not this node's", "peer", id.Short(), "dst", h.Dst)
		return false
	case !srcs.check(h.Src):
		c.spoofed.Add(1)
		n.drop(dropSpoofedSource, "a packet from a peer whose source is not its address", "peer", id.Short(), "src", h.Src, "dst", h.Dst)
		return false
	case len(pkt) > n.devMTU:
		n.drop(dropTooBig, "a packet from a peer larger than the device MTU", "peer", id.Short(), "len", len(pkt), "mtu", n.devMTU)
		return false
	}
	c.recvPackets.Add(1)
	c.recvBytes.Add(uint64(len(pkt)))
	return true
}
