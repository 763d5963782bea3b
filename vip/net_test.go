package vip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/tun"
	"github.com/gridlink/gridlink/tun/tuntest"
)

// A test grid: nodes whose Networks run on tuntest pairs (the test holds
// the host's end, app), joined by net.Pipe connections, with a map for a
// directory.

type node struct {
	id     identity.ID
	v4, v6 netip.Addr
	app    *tuntest.Device // the host's side: what programs send and receive
	in     chan []byte     // what arrived at app
	net    *Network
	log    *syncBuffer
}

type grid struct {
	t     testing.TB
	nodes []*node

	mu       sync.Mutex
	resolves int // Resolve calls
	dir      map[netip.Addr]identity.ID
	byID     map[identity.ID]*node
	dials    map[identity.ID]int
	hook     func(from, to identity.ID) net.Conn // when it returns a conn, DialPeer gives that (called under mu)
	refuse   map[identity.ID]bool                // DialPeer fails for these
	// refuseAfter: a refused DialPeer fails only after this long (a
	// method race waiting for a connect's timeout), or when its context
	// ends
	refuseAfter time.Duration
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (g *grid) Resolve(ctx context.Context, a netip.Addr) (identity.ID, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.resolves++
	id, ok := g.dir[a]
	if !ok {
		return identity.ID{}, ErrNoNode
	}
	return id, nil
}

type pipeDialer struct {
	g    *grid
	from identity.ID
}

func (d pipeDialer) DialPeer(ctx context.Context, id identity.ID) (net.Conn, error) {
	g := d.g
	g.mu.Lock()
	g.dials[id]++
	to, refused, after := g.byID[id], g.refuse[id], g.refuseAfter
	var c net.Conn
	if g.hook != nil {
		c = g.hook(d.from, id)
	}
	g.mu.Unlock()
	if c != nil {
		return c, nil
	}
	if refused {
		select {
		case <-time.After(after):
		case <-ctx.Done():
		}
		return nil, fmt.Errorf("refusing to dial %s", id.Short())
	}
	if to == nil {
		return nil, fmt.Errorf("no node %s", id.Short())
	}
	mine, theirs := net.Pipe()
	if err := to.net.Accept(theirs, d.from); err != nil {
		mine.Close()
		return nil, err
	}
	return mine, nil
}

// newGrid starts count nodes with device MTU 1500; cfg edits each
// node's Config.
func newGrid(t testing.TB, count int, cfg func(*Config)) *grid {
	g := &grid{t: t, dir: map[netip.Addr]identity.ID{}, byID: map[identity.ID]*node{}, dials: map[identity.ID]int{}}
	for i := range count {
		id := testID(100 + i)
		v4, v6, err := Addrs(DefaultPrefix4, DefaultPrefix6, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		app, dev := tuntest.Pair(1500)
		nd := &node{id: id, v4: v4, v6: v6, app: app, in: make(chan []byte, 4096), log: &syncBuffer{}}
		c := Config{
			Device: dev, ID: id, Addrs: []netip.Addr{v4, v6},
			Resolver: g, Dialer: pipeDialer{g, id},
			Logger: slog.New(slog.NewTextHandler(nd.log, nil)),
		}
		if cfg != nil {
			cfg(&c)
		}
		nd.net, err = New(c)
		if err != nil {
			t.Fatal(err)
		}
		g.dir[v4], g.dir[v6] = id, id
		g.byID[id] = nd
		g.nodes = append(g.nodes, nd)
		go func() {
			bufs := [][]byte{make([]byte, tun.Offset+1500)}
			sizes := []int{0}
			for {
				if _, err := app.Read(bufs, sizes, tun.Offset); err != nil {
					close(nd.in)
					return
				}
				nd.in <- bytes.Clone(bufs[0][tun.Offset : tun.Offset+sizes[0]])
			}
		}()
		t.Cleanup(func() {
			nd.net.Close()
			app.Close()
		})
	}
	return g
}

// send writes pkts into n's device as its programs would, in one batch.
func (n *node) send(t *testing.T, pkts ...[]byte) {
	t.Helper()
	bufs := make([][]byte, len(pkts))
	for i, p := range pkts {
		bufs[i] = append(make([]byte, tun.Offset), p...)
	}
	if _, err := n.app.Write(bufs, tun.Offset); err != nil {
		t.Fatal(err)
	}
}

// recv returns the next packet n's programs receive; waiting long means
// it never comes (a correctness bound).
func (n *node) recv(t *testing.T, what string) []byte {
	t.Helper()
	select {
	case p := <-n.in:
		return p
	case <-time.After(testwait.Default):
		t.Fatalf("no packet at %s: %s", n.v4, what)
		return nil
	}
}

func udp4(src, dst netip.Addr, tag string, size int) []byte {
	return ipv4(src, dst, 17, append([]byte(tag), make([]byte, max(0, size-20-len(tag)))...))
}

func udp6(src, dst netip.Addr, tag string, size int) []byte {
	return ipv6(src, dst, 17, append([]byte(tag), make([]byte, max(0, size-40-len(tag)))...))
}

func expect(t *testing.T, n *node, want []byte, what string) {
	t.Helper()
	if got := n.recv(t, what); !bytes.Equal(got, want) {
		t.Fatalf("%s: got %d bytes %x..., want %d bytes %x...", what, len(got), got[:min(len(got), 48)], len(want), want[:min(len(want), 48)])
	}
}

func TestPacketsCrossBothWays(t *testing.T) {
	g := newGrid(t, 2, nil)
	a, b := g.nodes[0], g.nodes[1]
	var batch [][]byte
	for i := range 50 {
		batch = append(batch, udp4(a.v4, b.v4, fmt.Sprintf("a->b %d", i), 100+20*i), udp6(a.v6, b.v6, fmt.Sprintf("a->b v6 %d", i), 1500-i))
	}
	a.send(t, batch...)
	// In order per destination (each is looked up on its own).
	var got4, got6, want4, want6 [][]byte
	for i, p := range batch {
		if i%2 == 0 {
			want4 = append(want4, p)
		} else {
			want6 = append(want6, p)
		}
		if p := b.recv(t, fmt.Sprintf("packet %d from a", i)); p[0]>>4 == 4 {
			got4 = append(got4, p)
		} else {
			got6 = append(got6, p)
		}
	}
	for i := range want4 {
		if i >= len(got4) || !bytes.Equal(got4[i], want4[i]) || i >= len(got6) || !bytes.Equal(got6[i], want6[i]) {
			t.Fatalf("packet %d of each family not the one sent (got %d IPv4, %d IPv6)", i, len(got4), len(got6))
		}
	}
	back := []([]byte){udp4(b.v4, a.v4, "b->a", 1500), udp4(b.v4, a.v4, "b->a 2", 60)}
	b.send(t, back...)
	for i, p := range back {
		expect(t, a, p, fmt.Sprintf("packet %d from b", i))
	}
	back6 := udp6(b.v6, a.v6, "b->a v6", 60)
	b.send(t, back6)
	expect(t, a, back6, "IPv6 packet from b")
	var bytesAB uint64
	for _, p := range batch {
		bytesAB += uint64(len(p))
	}
	waitSent(t, a, b, 100)
	waitSent(t, b, a, 3)
	sa, sb := a.net.Stats(), b.net.Stats()
	if p := sa.Peer(b.id); p.SentPackets != 100 || p.SentBytes != bytesAB || p.RecvPackets != 3 || !p.Connected {
		t.Errorf("a's counters of b: %+v, want 100 packets (%d bytes) sent, 3 received", p, bytesAB)
	}
	if p := sb.Peer(a.id); p.RecvPackets != 100 || p.RecvBytes != bytesAB || p.SentPackets != 3 {
		t.Errorf("b's counters of a: %+v", p)
	}
	if sa.Drops != (Drops{}) || sb.Drops != (Drops{}) {
		t.Errorf("drops: a %+v, b %+v", sa.Drops, sb.Drops)
	}
}

// A program on the node sends from an address that is not the node's:
// dropped before it leaves, counted.
func TestLocalSpoofedSourceDropped(t *testing.T) {
	g := newGrid(t, 3, nil)
	a, b, c := g.nodes[0], g.nodes[1], g.nodes[2]
	a.send(t,
		udp4(c.v4, b.v4, "spoof: c's address", 100),
		udp6(c.v6, b.v6, "spoof: c's address", 100),
		udp4(netip.MustParseAddr("192.0.2.1"), b.v4, "spoof: outside", 100),
	)
	marker := udp4(a.v4, b.v4, "marker", 100)
	a.send(t, marker)
	expect(t, b, marker, "the marker after the spoofed packets")
	waitSent(t, a, b, 1)
	s := a.net.Stats()
	if s.Drops.SourceNotOurs != 3 || s.Peer(b.id).SentPackets != 1 {
		t.Errorf("a: %+v, sent to b %d; want 3 dropped for their source, 1 sent", s.Drops, s.Peer(b.id).SentPackets)
	}
	if b.net.Stats().Drops.SpoofedSource != 0 {
		t.Errorf("b saw spoofed packets: a sent them")
	}
}

// A peer (its identity the connection's) sends packets with another
// node's source: dropped, counted against it and logged; its own and
// other peers' packets still arrive.
func TestPeerSpoofedSourceDropped(t *testing.T) {
	g := newGrid(t, 3, nil)
	a, b, c := g.nodes[0], g.nodes[1], g.nodes[2]
	evil, theirs := net.Pipe()
	defer evil.Close()
	if err := a.net.Accept(theirs, b.id); err != nil { // b's connection, as vconn would authenticate it
		t.Fatal(err)
	}
	own := udp4(b.v4, a.v4, "b as b", 100)
	go evil.Write(frames(
		udp4(c.v4, a.v4, "b as c", 100),
		udp6(c.v6, a.v6, "b as c v6", 100),
		udp4(netip.MustParseAddr("100.96.7.7"), a.v4, "b as nobody", 100),
		udp4(b.v4, c.v4, "b to c through a", 100),
		own,
	))
	expect(t, a, own, "b's own packet after its spoofed ones")
	fromC := udp6(c.v6, a.v6, "c", 200)
	c.send(t, fromC)
	expect(t, a, fromC, "c's packet")
	s := a.net.Stats()
	if s.Drops.SpoofedSource != 3 || s.Peer(b.id).Spoofed != 3 || s.Drops.NotForUs != 1 {
		t.Errorf("a: drops %+v, b spoofed %d; want 3 spoofed, 1 not for a", s.Drops, s.Peer(b.id).Spoofed)
	}
	if s.Peer(b.id).RecvPackets != 1 || s.Peer(c.id).RecvPackets != 1 || s.Peer(c.id).Spoofed != 0 {
		t.Errorf("a's peers: %+v", s.Peers)
	}
	log := a.log.String()
	if !bytes.Contains([]byte(log), []byte(dropSpoofedSource.String())) || !bytes.Contains([]byte(log), []byte(b.id.Short())) {
		t.Errorf("a's log does not name the spoofed source and the peer:\n%s", log)
	}
}

// A peer that cycles source addresses (each packet a source not seen
// before) cannot make every packet cost a directory lookup: past a burst,
// its unknown sources are refused as spoofed without asking, and its own
// packets (from its address, known before) still cross.
func TestPeerCyclingSourcesThrottled(t *testing.T) {
	g := newGrid(t, 2, nil)
	a, b := g.nodes[0], g.nodes[1]
	evil, theirs := net.Pipe()
	defer evil.Close()
	if err := a.net.Accept(theirs, b.id); err != nil {
		t.Fatal(err)
	}
	const n = 500
	var pkts [][]byte
	for i := range n {
		src := netip.AddrFrom4([4]byte{100, 97, byte(i >> 8), byte(i)})
		pkts = append(pkts, udp4(src, a.v4, "cycling", 100))
	}
	own := udp4(b.v4, a.v4, "b as b", 100)
	go evil.Write(frames(own))
	expect(t, a, own, "b's own packet")
	g.mu.Lock()
	before := g.resolves
	g.mu.Unlock()
	start := time.Now()
	go evil.Write(frames(append(pkts, own)...))
	expect(t, a, own, "b's own packet after its cycling ones")
	elapsed := time.Since(start)
	g.mu.Lock()
	asked := g.resolves - before
	g.mu.Unlock()
	// the burst and the refill while the packets arrived (b's own source
	// was known before)
	if most := sourceLookupBurst + int(elapsed.Seconds()*sourceLookupRate) + 1; asked > most {
		t.Errorf("%d packets with new sources made %d directory lookups in %v; want at most %d", n, asked, elapsed, most)
	}
	if s := a.net.Stats(); s.Peer(b.id).Spoofed != n || s.Peer(b.id).RecvPackets != 2 {
		t.Errorf("b: %d spoofed, %d received; want %d and 2", s.Peer(b.id).Spoofed, s.Peer(b.id).RecvPackets, n)
	}
}

// A packet larger than the tunnel MTU comes back as an ICMP error to its
// sender, with the MTU; one of exactly the MTU crosses.
func TestTooBigGetsICMP(t *testing.T) {
	g := newGrid(t, 2, func(c *Config) { c.MTU = 1280 })
	a, b := g.nodes[0], g.nodes[1]
	big4, big6 := udp4(a.v4, b.v4, "big", 1400), udp6(a.v6, b.v6, "big", 1281)
	a.send(t, big4)
	if mtu := checkICMPv4(t, a.recv(t, "ICMP fragmentation needed"), 3, 4, b.v4, a.v4, big4); mtu != 1280 {
		t.Errorf("fragmentation needed with MTU %d, want 1280", mtu)
	}
	a.send(t, big6)
	if mtu := checkICMPv6(t, a.recv(t, "ICMPv6 packet too big"), 2, 0, b.v6, a.v6, big6); mtu != 1280 {
		t.Errorf("packet too big with MTU %d, want 1280", mtu)
	}
	fits := udp6(a.v6, b.v6, "fits", 1280)
	a.send(t, fits)
	expect(t, b, fits, "a packet of the MTU")
	waitSent(t, a, b, 1)
	if s := a.net.Stats(); s.Drops.TooBig != 2 || s.Peer(b.id).SentPackets != 1 {
		t.Errorf("a: %+v, sent %d", s.Drops, s.Peer(b.id).SentPackets)
	}
}

// A destination no node holds: dropped, counted, and an ICMP unreachable
// to the sender; looked up once while the answer holds.
func TestUnknownDestinationUnreachable(t *testing.T) {
	g := newGrid(t, 1, nil)
	a := g.nodes[0]
	nobody4, nobody6 := netip.MustParseAddr("100.96.9.9"), netip.MustParseAddr("fd67:726c::9")
	for i := range 2 {
		p4 := udp4(a.v4, nobody4, "to nobody", 100)
		a.send(t, p4)
		checkICMPv4(t, a.recv(t, "ICMP host unreachable"), 3, 1, nobody4, a.v4, p4)
		p6 := udp6(a.v6, nobody6, "to nobody", 100)
		a.send(t, p6)
		checkICMPv6(t, a.recv(t, "ICMPv6 address unreachable"), 1, 3, nobody6, a.v6, p6)
		if s := a.net.Stats(); s.Drops.NoRoute != uint64(2*(i+1)) {
			t.Errorf("round %d: %+v", i, s.Drops)
		}
	}
	// The kernel's multicast chatter is dropped without a word.
	a.send(t, udp6(netip.MustParseAddr("fe80::1"), netip.MustParseAddr("ff02::2"), "router solicitation", 60))
	marker := udp4(a.v4, nobody4, "marker", 100)
	a.send(t, marker)
	checkICMPv4(t, a.recv(t, "ICMP about the marker"), 3, 1, nobody4, a.v4, marker)
	if s := a.net.Stats(); s.Drops.NotUnicast != 1 || s.Drops.SourceNotOurs != 0 {
		t.Errorf("multicast: %+v", s.Drops)
	}
}

// Malformed packets, from the device and from a peer, are dropped and
// counted; a frame that cannot hold a packet ends the connection.
func TestMalformedDropped(t *testing.T) {
	g := newGrid(t, 2, nil)
	a, b := g.nodes[0], g.nodes[1]
	liar := udp4(a.v4, b.v4, "liar", 100)
	liar[3] = 99 // total length 99 in a 100-byte packet
	a.send(t, liar)
	marker := udp4(a.v4, b.v4, "marker", 100)
	a.send(t, marker)
	expect(t, b, marker, "the marker after a malformed packet")
	if d := a.net.Stats().Drops; d.Malformed != 1 {
		t.Errorf("a: %+v", d)
	}
	evil, theirs := net.Pipe()
	if err := b.net.Accept(theirs, a.id); err != nil {
		t.Fatal(err)
	}
	go func() {
		evil.Write(frames(liar, marker))
		evil.Write([]byte{0, 3, 1, 2, 3})
	}()
	expect(t, b, marker, "the marker after a malformed packet from a peer")
	testwait.Until(t, "the bad frame counted", 0, func() bool { return b.net.Stats().Drops.Malformed == 2 })
	evil.SetWriteDeadline(time.Now().Add(testwait.Default))
	if _, err := evil.Write([]byte{0}); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("writing on after the bad frame: %v, want the connection closed", err)
	}
}

// stalledGrid is three nodes where a's connection to c is never read.
func stalledGrid(t *testing.T) (g *grid, a, b, c *node, stalled net.Conn) {
	g = newGrid(t, 3, func(c *Config) { c.QueueLen = 8 })
	a, b, c = g.nodes[0], g.nodes[1], g.nodes[2]
	mine, theirs := net.Pipe()
	t.Cleanup(func() { theirs.Close() })
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hook = func(from, to identity.ID) net.Conn {
		if from == a.id && to == c.id {
			g.hook = nil // once
			return mine
		}
		return nil
	}
	return g, a, b, c, theirs
}

// A peer that does not read fills its queue: further packets to it are
// dropped and counted, and other peers' packets still go.
func TestFullQueueDropsNeverBlocks(t *testing.T) {
	_, a, b, c, _ := stalledGrid(t)
	stallWriter(t, a, c)
	const n = 100
	for i := range n {
		a.send(t, udp4(a.v4, c.v4, fmt.Sprint("to c ", i), 1000))
	}
	toB := udp4(a.v4, b.v4, "to b", 100)
	a.send(t, toB)
	expect(t, b, toB, "a packet to b while c's queue is full")
	s := a.net.Stats()
	if pc := s.Peer(c.id); s.Drops.QueueFull != n-8 || pc.QueueFull != n-8 || pc.Queued != 8 || pc.SentPackets != 0 {
		t.Errorf("a: %+v; c: %+v; want 8 queued, %d dropped for a full queue", s.Drops, pc, n-8)
	}
}

// stallWriter sends a first packet from a to c, whose connection nobody
// reads, and waits until a's writer holds it: c connected, its queue
// empty. From then on, what a sends c stays in the queue.
func stallWriter(t *testing.T, a, c *node) {
	t.Helper()
	a.send(t, udp4(a.v4, c.v4, "to c, first", 1000))
	testwait.Until(t, "a's writer to c holding the first packet", 0, func() bool {
		pc := a.net.Stats().Peer(c.id)
		return pc.Connected && pc.Queued == 0
	})
}

// The connection of a peer dies: the packet in flight is lost and
// counted, the peer is dialed again at once, and the packets queued
// meanwhile go on the new connection, in order; other peers are
// unaffected.
func TestDeadPeerDialedAgainQueueKept(t *testing.T) {
	g, a, b, c, stalled := stalledGrid(t)
	stallWriter(t, a, c)
	const n = 50
	for i := range n {
		a.send(t, udp4(a.v4, c.v4, fmt.Sprint("to c ", i), 1000))
	}
	toB := udp4(a.v4, b.v4, "to b", 100)
	a.send(t, toB)
	expect(t, b, toB, "a packet to b") // so a has read all the packets to c
	if s := a.net.Stats(); s.Peer(c.id).Queued != 8 || s.Drops.QueueFull != n-8 {
		t.Fatalf("before c's connection dies: %+v, c %+v; want 8 queued, %d dropped", s.Drops, s.Peer(c.id), n-8)
	}
	stalled.Close()
	for i := range 8 {
		expect(t, c, udp4(a.v4, c.v4, fmt.Sprint("to c ", i), 1000), fmt.Sprintf("queued packet %d to c, on the new connection", i))
	}
	s := a.net.Stats()
	if pc := s.Peer(c.id); !pc.Connected || pc.ConnLost != 1 || s.Drops.ConnLost != 1 || pc.Redials != 0 {
		t.Errorf("c after its connection died: %+v, drops %+v; want connected again, the packet in flight lost, dialed again at once", pc, s.Drops)
	}
	a.send(t, toB)
	expect(t, b, toB, "a packet to b after c's connection died")
	g.mu.Lock()
	dials := g.dials[c.id]
	g.mu.Unlock()
	if dials != 2 {
		t.Errorf("a dialed c %d times, want 2", dials)
	}
}

// A peer that cannot be dialed: its packets dropped and counted, and
// after dialRetry it is dialed again.
func TestUndialablePeer(t *testing.T) {
	g := newGrid(t, 2, nil)
	a, b := g.nodes[0], g.nodes[1]
	g.mu.Lock()
	g.refuse = map[identity.ID]bool{b.id: true}
	g.mu.Unlock()
	a.send(t, udp4(a.v4, b.v4, "refused", 100), udp4(a.v4, b.v4, "refused", 100))
	testwait.Until(t, "both packets to b dropped", 0, func() bool {
		d := a.net.Stats().Drops
		return d.ConnLost+d.NoConnection == 2
	})
	g.mu.Lock()
	g.refuse = nil
	g.mu.Unlock()
	p := udp4(a.v4, b.v4, "after", 100)
	testwait.Until(t, "a packet to b once b can be dialed", 0, func() bool {
		a.send(t, p)
		select {
		case got := <-b.in:
			return bytes.Equal(got, p)
		case <-time.After(100 * time.Millisecond):
			return false
		}
	})
}

// waitSent waits until from's counters say it sent n packets to to (the
// count follows the write, which may end after to has the packets).
func waitSent(t *testing.T, from, to *node, n uint64) {
	t.Helper()
	testwait.Until(t, fmt.Sprintf("%d packets counted sent", n), 0, func() bool {
		return from.net.Stats().Peer(to.id).SentPackets >= n
	})
}

// Both ends send first: each dials the other, and each reads on both
// connections, so nothing is lost.
func TestBothDialAtOnce(t *testing.T) {
	g := newGrid(t, 2, nil)
	a, b := g.nodes[0], g.nodes[1]
	var toB, toA [][]byte
	for i := range 20 {
		toB = append(toB, udp4(a.v4, b.v4, fmt.Sprint("to b ", i), 200))
		toA = append(toA, udp4(b.v4, a.v4, fmt.Sprint("to a ", i), 200))
	}
	done := make(chan error)
	go func() {
		bufs := make([][]byte, len(toA))
		for i, p := range toA {
			bufs[i] = append(make([]byte, tun.Offset), p...)
		}
		_, err := b.app.Write(bufs, tun.Offset)
		done <- err
	}()
	a.send(t, toB...)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		expect(t, b, toB[i], fmt.Sprint("packet to b ", i))
		expect(t, a, toA[i], fmt.Sprint("packet to a ", i))
	}
}
