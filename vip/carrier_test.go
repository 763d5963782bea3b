package vip

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/vconn"
)

// countConn is a pipe end that counts the bytes written to it.
type countConn struct {
	net.Conn
	written atomic.Int64
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

// carrierDialer is pipeDialer with carriers: DialCarrier gives pipes
// whose far end AcceptCarrier serves (fails, when noCarriers: a node
// older than carriers); it keeps this end of every connection.
type carrierDialer struct {
	pipeDialer
	noCarriers bool

	mu    sync.Mutex
	main  []*countConn
	carrs []*countConn
}

func (d *carrierDialer) DialPeer(ctx context.Context, id identity.ID) (net.Conn, error) {
	c, err := d.pipeDialer.DialPeer(ctx, id)
	if err != nil {
		return nil, err
	}
	cc := &countConn{Conn: c}
	d.mu.Lock()
	d.main = append(d.main, cc)
	d.mu.Unlock()
	return cc, nil
}

func (d *carrierDialer) DialCarrier(ctx context.Context, id identity.ID, method vconn.Method) (net.Conn, error) {
	if d.noCarriers {
		return nil, errors.New("no listener on the carrier port")
	}
	d.g.mu.Lock()
	to := d.g.byID[id]
	d.g.mu.Unlock()
	mine, theirs := net.Pipe()
	go to.net.AcceptCarrier(theirs, d.from)
	cc := &countConn{Conn: mine}
	d.mu.Lock()
	d.carrs = append(d.carrs, cc)
	d.mu.Unlock()
	return cc, nil
}

// carrierGrid is two nodes whose dialers open carriers; a may use
// carriersA connections to a peer, b carriersB.
func carrierGrid(t *testing.T, carriersA, carriersB int, noCarriers bool) (a, b *node, da *carrierDialer) {
	var dialers []*carrierDialer
	var g *grid
	g = newGrid(t, 2, func(c *Config) {
		d := &carrierDialer{pipeDialer: pipeDialer{g, c.ID}, noCarriers: noCarriers}
		dialers = append(dialers, d)
		c.Dialer = d
		c.Carriers = carriersB
		if len(dialers) == 1 {
			c.Carriers = carriersA
		}
	})
	for _, d := range dialers {
		d.g = g // newGrid made g after the dialers
	}
	return g.nodes[0], g.nodes[1], dialers[0]
}

// flowPacket is packet seq of flow f from a to b: UDP from port 1000+f,
// its payload the sequence number.
func flowPacket(a, b *node, f, seq int) []byte {
	p := udp4(a.v4, b.v4, "", 200)
	binary.BigEndian.PutUint16(p[20:], uint16(1000+f))
	binary.BigEndian.PutUint16(p[22:], 7)
	binary.BigEndian.PutUint32(p[28:], uint32(seq))
	return p
}

// flowRounds sends rounds of one packet per flow (flows flows) from a to
// b, each round in one batch, from sequence number from on, and checks
// that b receives every one and each flow's in order.
func flowRounds(t *testing.T, a, b *node, flows, from, rounds int) {
	t.Helper()
	next := make([]int, flows)
	for i := range next {
		next[i] = from
	}
	for r := range rounds {
		var batch [][]byte
		for f := range flows {
			batch = append(batch, flowPacket(a, b, f, from+r))
		}
		a.send(t, batch...)
		for range flows {
			p := b.recv(t, fmt.Sprintf("round %d", r))
			f := int(binary.BigEndian.Uint16(p[20:])) - 1000
			seq := int(binary.BigEndian.Uint32(p[28:]))
			if f < 0 || f >= flows || seq != next[f] {
				t.Fatalf("round %d: flow %d got packet %d, want %d: out of order or lost", r, f, seq, next[f])
			}
			next[f]++
		}
	}
}

// carriersUp sends flows until a has want carriers to b.
func carriersUp(t *testing.T, a, b *node, flows, want int) int {
	t.Helper()
	seq := 0
	testwait.Until(t, fmt.Sprintf("%d carriers", want), 0, func() bool {
		flowRounds(t, a, b, flows, seq, 5)
		seq += 5
		return a.net.Stats().Peer(b.id).Carriers == want
	})
	return seq
}

// Packets of 8 flows to a peer open carriers, as many as both ends
// agree on (a would have 8 connections, b 4: 3 carriers besides the
// main connection); flows spread over them; every flow's packets arrive
// whole and in order.
func TestCarriersKeepFlowOrder(t *testing.T) {
	a, b, da := carrierGrid(t, 8, 4, false)
	seq := carriersUp(t, a, b, 8, 3)
	flowRounds(t, a, b, 8, seq, 100)
	if st := b.net.Stats().Peer(a.id); st.Carriers != 3 {
		t.Errorf("b has %d carriers to a, want 3", st.Carriers)
	}
	da.mu.Lock()
	defer da.mu.Unlock()
	used := 0
	for _, c := range append(da.carrs, da.main...) {
		if c.written.Load() > 0 {
			used++
		}
	}
	if used < 2 {
		t.Errorf("8 flows went over %d connection(s), want several", used)
	}
}

// A carrier that dies takes no flow down: its flows hash onto the other
// connections, every packet sent after it died arrives, in order, and
// the peer's main connection stays.
func TestCarrierDeathMovesFlows(t *testing.T) {
	a, b, da := carrierGrid(t, 4, 4, false)
	seq := carriersUp(t, a, b, 8, 3)
	before := a.net.Stats().Peer(b.id)
	da.mu.Lock()
	var dead *countConn
	for _, c := range da.carrs {
		if c.written.Load() > 0 {
			dead = c
			break
		}
	}
	da.mu.Unlock()
	if dead == nil {
		t.Fatal("no carrier carried a packet")
	}
	dead.Close()
	testwait.Until(t, "the dead carrier gone", 0, func() bool {
		return a.net.Stats().Peer(b.id).Carriers < 3 || a.net.Stats().Peer(b.id).Conns < 4
	})
	written := dead.written.Load()
	flowRounds(t, a, b, 8, seq, 100)
	if dead.written.Load() != written {
		t.Error("packets written on the dead carrier")
	}
	after := a.net.Stats().Peer(b.id)
	if !after.Connected || after.Switches != before.Switches || after.ConnLost != 0 {
		t.Errorf("after a carrier died: %+v (before %+v)", after, before)
	}
	if d := a.net.Stats().Drops; d.NoConnection != 0 || d.ConnLost != 0 {
		t.Errorf("drops %+v", d)
	}
}

// A peer that uses one connection refuses a carrier, naming why in its
// log, and the dialer's log says the same; a peer without carriers at
// all (an older node: no CarrierPort) leaves one connection too. Flows
// go on, in order.
func TestCarriersRefusedKeepOne(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		a, b, _ := carrierGrid(t, 8, 1, false)
		seq := 0
		testwait.Until(t, "a's carrier refused", 0, func() bool {
			flowRounds(t, a, b, 8, seq, 5)
			seq += 5
			return strings.Contains(a.log.String(), carrierReason(carrierOff))
		})
		if !strings.Contains(b.log.String(), carrierReason(carrierOff)) {
			t.Errorf("b's log does not name the refusal:\n%s", b.log)
		}
		flowRounds(t, a, b, 8, seq, 20)
		if st := a.net.Stats().Peer(b.id); st.Carriers != 0 {
			t.Errorf("%d carriers to a peer that refuses them", st.Carriers)
		}
	})
	t.Run("older peer", func(t *testing.T) {
		a, b, _ := carrierGrid(t, 8, 8, true)
		seq := 0
		testwait.Until(t, "a's carrier dial failed", 0, func() bool {
			flowRounds(t, a, b, 8, seq, 5)
			seq += 5
			return strings.Contains(a.log.String(), "no carrier to a peer")
		})
		flowRounds(t, a, b, 8, seq, 20)
		if st := a.net.Stats().Peer(b.id); st.Carriers != 0 || !st.Connected {
			t.Errorf("peer without carriers: %+v", st)
		}
	})
}

func TestCarrierIndexSpreadsAndKeeps(t *testing.T) {
	counts := make([]int, 4)
	for f := range uint64(4000) {
		i := carrierIndex(f*0x9e3779b97f4a7c15, 3)
		counts[i]++
		if j := carrierIndex(f*0x9e3779b97f4a7c15, 3); j != i {
			t.Fatalf("flow %d: %d then %d", f, i, j)
		}
	}
	for i, c := range counts {
		if c < 700 {
			t.Errorf("connection %d got %d of 4000 flows: %v", i, c, counts)
		}
	}
}

func FuzzCarrierHello(f *testing.F) {
	f.Add([]byte{carrierMagic, 8})
	f.Add([]byte{carrierMagic, 4, carrierOK})
	f.Add([]byte{carrierMagic, 0, carrierOff})
	f.Add([]byte{0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		if want, err := parseHello(b); err == nil && (want < 2 || len(b) != carrierHelloLen) {
			t.Fatalf("hello %x accepted as %d", b, want)
		} else if err != nil && !errors.Is(err, ErrBadHello) {
			t.Fatalf("hello %x: %v", b, err)
		}
		agreed, reason, err := parseAnswer(b)
		switch {
		case err != nil:
			if !errors.Is(err, ErrBadHello) {
				t.Fatalf("answer %x: %v", b, err)
			}
		case agreed == 0 && reason == carrierOK, agreed == 1, agreed >= 2 && reason != carrierOK:
			t.Fatalf("answer %x accepted as %d, %d", b, agreed, reason)
		}
	})
}

// A carrier's refusal is one of the refusal family (direct.ErrRefused)
// and still ErrCarrierRefused, its words unchanged.
func TestCarrierRefusedIsErrRefused(t *testing.T) {
	err := fmt.Errorf("carrier: %w", &CarrierRefusedError{Reason: "too many"})
	if !errors.Is(err, direct.ErrRefused) || !errors.Is(err, ErrCarrierRefused) {
		t.Errorf("%v: errors.Is ErrRefused %v, ErrCarrierRefused %v; want both", err, errors.Is(err, direct.ErrRefused), errors.Is(err, ErrCarrierRefused))
	}
	if got, want := err.Error(), "carrier: vip: carrier refused by "+(identity.ID{}).Short()+": too many"; got != want {
		t.Errorf("says %q, want %q", got, want)
	}
}
