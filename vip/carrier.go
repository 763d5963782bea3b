package vip

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math/bits"
	"net"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/vconn"
)

// Carriers: one TCP connection between two nodes is one congestion
// window, so many flows across a lossy long link get what one flow does
// (TCP over TCP). While a peer is reached by a shortcut (not routed) and
// packets of several flows go to it, the Network opens more connections
// to it, its carriers, on CarrierPort by the shortcut's method, up to the
// count both ends agree on (Config.Carriers); each flow (its addresses,
// protocol and ports) is hashed onto one of them and the main
// connection, so a flow keeps its order. A carrier that ends takes no
// flow down: its flows hash onto the others from the next packet (its
// queued packets go to the main connection's queue). A node older than
// carriers has no CarrierPort: the dial fails, and the peer keeps one
// connection.
//
// Carrier hello, on a connection to CarrierPort, before its frames:
//
//	dialer → acceptor  2 bytes: carrierMagic, the most connections the
//	                   dialer uses toward the peer (2..255, the main one
//	                   included)
//	acceptor → dialer  3 bytes: carrierMagic, the most connections agreed
//	                   (the smaller of both ends'; 0: refused), and why it
//	                   refused (carrierOK when it did not)
//
// then frames both ways, as on any packet connection (frame.go).
const (
	carrierMagic     = 0xc1
	carrierHelloLen  = 2
	carrierAnswerLen = 3
	helloTimeout     = 10 * time.Second

	// DefaultCarriers is the most connections to a peer when
	// Config.Carriers is zero.
	DefaultCarriers = 8
	maxCarriers     = 255
	// carrierQueueShare: a carrier queues a quarter of a peer's
	// QueueLen (64 packets at least), so that a peer's carriers hold
	// no more than a few main queues' worth however many they are.
	carrierQueueShare = 4
	// flowWindow is how long the flows to a peer are counted before the
	// count decides on carriers.
	flowWindow = time.Second
)

// Why an acceptor refuses a carrier (the answer's third byte).
const (
	carrierOK        = 0
	carrierOff       = 1 // this node uses one connection per peer
	carrierEnough    = 2 // it has as many carriers to the peer as agreed
	carrierNoPrimary = 3 // it has no packet connection to the peer to add one to
	carrierClosing   = 4 // the network is closing
)

var carrierReasons = map[byte]string{
	carrierOff:       "the node uses one connection per peer",
	carrierEnough:    "the node has as many carriers to the peer as agreed",
	carrierNoPrimary: "the node has no packet connection to the peer to add a carrier to",
	carrierClosing:   "the node's virtual network is closing",
}

func carrierReason(r byte) string {
	if s, ok := carrierReasons[r]; ok {
		return s
	}
	return fmt.Sprintf("reason %d", r)
}

// ErrCarrierRefused matches every CarrierRefusedError.
var ErrCarrierRefused = errors.New("vip: carrier refused")

// CarrierRefusedError is the peer's refusal of a carrier, its reason in
// the words its log uses.
type CarrierRefusedError struct {
	Peer   identity.ID
	Reason string
	code   byte
}

func (e *CarrierRefusedError) Error() string {
	return fmt.Sprintf("vip: carrier refused by %s: %s", e.Peer.Short(), e.Reason)
}

// Unwrap makes it ErrCarrierRefused and one of the refusal family
// (direct.ErrRefused).
func (e *CarrierRefusedError) Unwrap() []error { return []error{ErrCarrierRefused, direct.ErrRefused} }

// ErrBadHello matches every HelloError.
var ErrBadHello = errors.New("vip: bad carrier hello")

// HelloError is a carrier hello or answer that is not one.
type HelloError struct {
	What string
}

func (e *HelloError) Error() string { return "vip: bad carrier hello: " + e.What }

func (e *HelloError) Unwrap() error { return ErrBadHello }

// parseHello decodes the dialer's hello: the most connections it uses.
func parseHello(b []byte) (int, error) {
	switch {
	case len(b) != carrierHelloLen:
		return 0, &HelloError{What: fmt.Sprintf("%d bytes, want %d", len(b), carrierHelloLen)}
	case b[0] != carrierMagic:
		return 0, &HelloError{What: fmt.Sprintf("magic %#x", b[0])}
	case b[1] < 2:
		return 0, &HelloError{What: fmt.Sprintf("%d connections asked for, at least 2", b[1])}
	}
	return int(b[1]), nil
}

// parseAnswer decodes the acceptor's answer: the connections agreed, or
// why it refused.
func parseAnswer(b []byte) (agreed int, reason byte, err error) {
	switch {
	case len(b) != carrierAnswerLen:
		return 0, 0, &HelloError{What: fmt.Sprintf("answer of %d bytes, want %d", len(b), carrierAnswerLen)}
	case b[0] != carrierMagic:
		return 0, 0, &HelloError{What: fmt.Sprintf("answer magic %#x", b[0])}
	case b[1] == 0 && b[2] == carrierOK, b[1] == 1, b[1] >= 2 && b[2] != carrierOK:
		return 0, 0, &HelloError{What: fmt.Sprintf("answer %d connections, reason %d", b[1], b[2])}
	}
	return int(b[1]), b[2], nil
}

// CarrierDialer is a Dialer that can open carriers: more connections to
// a peer's CarrierPort by the method of its main one.
type CarrierDialer interface {
	DialCarrier(ctx context.Context, id identity.ID, method vconn.Method) (net.Conn, error)
}

// carrier is one more connection to a peer: its own queue and writer.
type carrier struct {
	conn  net.Conn
	queue chan *pbuf
	done  chan struct{} // closed when it leaves the peer's carriers
}

var flowSeed = maphash.MakeSeed()

// flowHash is the hash of pkt's flow: its addresses, protocol and, for
// TCP, UDP, UDP-Lite and SCTP right behind the IP header (not a later
// fragment), its ports.
func flowHash(h Header, pkt []byte) uint64 {
	var k [37]byte
	s, d := h.Src.As16(), h.Dst.As16()
	copy(k[0:], s[:])
	copy(k[16:], d[:])
	k[32] = h.Protocol
	switch h.Protocol {
	case 6, 17, 132, 136:
		if h.FragOffset == 0 && len(pkt) >= h.HeaderLen+4 {
			copy(k[33:], pkt[h.HeaderLen:h.HeaderLen+4])
		}
	}
	return maphash.Bytes(flowSeed, k[:])
}

// carrierDialer is the Network's Dialer as a CarrierDialer, nil when it
// is not one or carriers are off.
func (n *Network) carrierDialer() CarrierDialer {
	if n.maxCarriers < 2 {
		return nil
	}
	cd, _ := n.cfg.Dialer.(CarrierDialer)
	return cd
}

// noteFlowLocked counts the flow of a packet to p, and once a window
// ends with more flows than p has connections, opens carriers (when p
// is on a shortcut and the peer has not said no).
func (p *peer) noteFlowLocked(flow uint64, now time.Time) {
	p.flowMask |= 1 << (flow & 63)
	if now.Sub(p.flowSince) < flowWindow {
		return
	}
	flows := bits.OnesCount64(p.flowMask)
	p.flowMask, p.flowSince = 0, now
	n := p.n
	cd := n.carrierDialer()
	cur := p.links[p.conn]
	if cd == nil || flows < 2 || p.carrierMax == 1 || p.carrierDialing || p.down || n.closed || cur == nil || cur.rank == rankRouted {
		return
	}
	want := min(flows, n.maxCarriers)
	if p.carrierMax > 0 {
		want = min(want, p.carrierMax)
	}
	if have := 1 + len(p.carriers); want > have {
		p.carrierDialing = true
		n.wg.Add(1)
		go n.dialCarriers(p, cd, cur.method, want-have)
	}
}

// dialCarriers opens count carriers to p, one after another, by method.
func (n *Network) dialCarriers(p *peer, cd CarrierDialer, method vconn.Method, count int) {
	defer n.wg.Done()
	defer func() {
		n.mu.Lock()
		p.carrierDialing = false
		n.mu.Unlock()
	}()
	for range count {
		n.mu.Lock()
		enough := p.down || (p.carrierMax > 0 && 1+len(p.carriers) >= p.carrierMax)
		n.mu.Unlock()
		if enough {
			return
		}
		c, agreed, err := n.dialCarrier(p, cd, method)
		n.mu.Lock()
		if err != nil {
			// A node without carriers (no CarrierPort: an older one),
			// one that has them off, or a carrier that could not be
			// set up: one connection to this peer from now on. One
			// that has enough, or no main connection yet: later.
			var re *CarrierRefusedError
			if !errors.As(err, &re) || re.code == carrierOff {
				p.carrierMax = 1
			}
			n.mu.Unlock()
			if n.ctx.Err() == nil && (re == nil || re.code != carrierEnough) && n.quiet.Allow("carrier") {
				n.log.Info("vip: no carrier to a peer: it keeps the connections it has", "peer", p.id.Short(), "err", err)
			}
			return
		}
		p.carrierMax = agreed
		if n.closed || p.down || 1+len(p.carriers) >= agreed {
			n.mu.Unlock()
			c.Close()
			return
		}
		n.addCarrierLocked(p, c, n.cfg.ID)
		n.mu.Unlock()
	}
}

// dialCarrier opens one carrier and says hello on it.
func (n *Network) dialCarrier(p *peer, cd CarrierDialer, method vconn.Method) (net.Conn, int, error) {
	ctx, cancel := context.WithTimeout(n.ctx, dialTimeout)
	defer cancel()
	c, err := cd.DialCarrier(ctx, p.id, method)
	if err != nil {
		return nil, 0, err
	}
	c.SetDeadline(time.Now().Add(helloTimeout))
	var ans [carrierAnswerLen]byte
	_, err = c.Write([]byte{carrierMagic, byte(n.maxCarriers)})
	if err == nil {
		_, err = io.ReadFull(c, ans[:])
	}
	agreed, reason, perr := parseAnswer(ans[:])
	switch {
	case err != nil:
	case perr != nil:
		err = perr
	case agreed == 0:
		err = &CarrierRefusedError{Peer: p.id, Reason: carrierReason(reason), code: reason}
	}
	if err != nil {
		c.Close()
		return nil, 0, err
	}
	c.SetDeadline(time.Time{})
	return c, agreed, nil
}

// AcceptCarrier serves a connection the peer id opened to CarrierPort
// (its identity authenticated by whoever accepted it): it reads the
// hello and takes the connection as one more carrier to the peer, or
// refuses it (answering why, and logging it in the same words). The
// Network owns conn from now on.
func (n *Network) AcceptCarrier(conn net.Conn, id identity.ID) error {
	conn.SetDeadline(time.Now().Add(helloTimeout))
	var hello [carrierHelloLen]byte
	if _, err := io.ReadFull(conn, hello[:]); err != nil {
		conn.Close()
		return err
	}
	want, err := parseHello(hello[:])
	if err != nil {
		conn.Close()
		n.log.Warn("vip: a peer's carrier: bad hello", "peer", id.Short(), "err", err)
		return err
	}
	n.mu.Lock()
	agreed, reason := min(want, n.maxCarriers), byte(carrierOK)
	p := n.peers[id]
	switch {
	case n.closed:
		reason = carrierClosing
	case n.maxCarriers < 2:
		reason = carrierOff
	case p == nil || p.down || p.conn == nil:
		reason = carrierNoPrimary
	case 1+len(p.carriers) >= agreed:
		reason = carrierEnough
	}
	if reason != carrierOK {
		n.mu.Unlock()
		conn.Write([]byte{carrierMagic, 0, reason})
		conn.Close()
		if n.quiet.Allow("carrier refused") {
			n.log.Info("vip: refused a peer's carrier", "peer", id.Short(), "reason", carrierReason(reason))
		}
		return &CarrierRefusedError{Peer: id, Reason: carrierReason(reason), code: reason}
	}
	// The answer goes out before the carrier is used: its frames follow.
	if _, err := conn.Write([]byte{carrierMagic, byte(agreed), carrierOK}); err != nil {
		n.mu.Unlock()
		conn.Close()
		return err
	}
	conn.SetDeadline(time.Time{})
	p.carrierMax = agreed
	n.addCarrierLocked(p, conn, id)
	n.mu.Unlock()
	return nil
}

// addCarrierLocked makes conn, dialed by dialer, a carrier of p: read
// like every link, written by its own writer, flows hashed onto it.
func (n *Network) addCarrierLocked(p *peer, conn net.Conn, dialer identity.ID) {
	m := methodOf(conn)
	l := &link{conn: conn, method: m, rank: rankOf(m), dialer: dialer, proof: proofOf(conn), carrier: true}
	p.links[conn] = l
	n.conns[conn] = struct{}{}
	c := &carrier{conn: conn, queue: make(chan *pbuf, max(n.queueLen/carrierQueueShare, 64)), done: make(chan struct{})}
	p.carriers = append(p.carriers, c)
	n.wg.Add(2)
	go n.receive(p, l)
	go n.writeCarrier(p, c)
}

// removeCarrierLocked takes c out of p's carriers; its queued packets go
// to p's main queue (their flows hash onto the others from now on).
func (n *Network) removeCarrierLocked(p *peer, conn net.Conn) {
	for i, c := range p.carriers {
		if c.conn != conn {
			continue
		}
		p.carriers = append(p.carriers[:i], p.carriers[i+1:]...)
		close(c.done)
		for moved := false; !moved; {
			select {
			case pkt := <-c.queue:
				if p.down {
					pkt.release()
					continue
				}
				select {
				case p.queue <- pkt:
				default:
					pkt.release()
					p.c.connLost.Add(1)
					n.drops[dropConnLost].Add(1)
				}
			default:
				moved = true
			}
		}
		return
	}
}

// writeCarrier writes c's queue to its connection, in batches, until it
// leaves p's carriers or its connection fails.
func (n *Network) writeCarrier(p *peer, c *carrier) {
	defer n.wg.Done()
	var w frameWriter
	batch := make([]*pbuf, 0, maxBatch)
	for {
		var pkt *pbuf
		select {
		case <-c.done:
			return
		case <-n.ctx.Done():
			return
		case pkt = <-c.queue:
		}
		if err := p.writeBatch(&w, c.conn, c.queue, pkt, batch, false); err != nil {
			n.linkEnded(p, c.conn, err)
			return
		}
	}
}

// carrierIndex picks the connection of a flow among k+1 (0: the main
// one) by jump consistent hashing (Lamping and Veach): a carrier added
// or lost moves the fewest flows.
func carrierIndex(flow uint64, k int) int {
	b, j := int64(-1), int64(0)
	for j < int64(k+1) {
		b = j
		flow = flow*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((flow>>33)+1)))
	}
	return int(b)
}
