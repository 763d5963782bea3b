package direct

import (
	"container/list"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Bounds on the connections a listener holds before their peers have
// proved anything (Gate).
const (
	// DefaultMaxPending bounds a Gate's pending handshakes in all.
	DefaultMaxPending = 256
	// DefaultMaxPendingPerSource bounds them per source address.
	DefaultMaxPendingPerSource = 16
	// FirstBytesTimeout is how long an accepted connection may take to
	// send its first message (a TLS ClientHello, whole): a peer that means
	// to connect sends it at once, an idle flooder never does.
	FirstBytesTimeout = 3 * time.Second
)

// Gate bounds the connections a listener holds while their handshakes run
// (unauthenticated: anyone can open them), in all (Max) and per source
// address (PerSource; an IPv6 source is its /64). Admit never refuses a
// newcomer: when a bound is reached it sheds an older pending connection
// instead (victimLocked says which): a source's idle connections (no
// whole first message yet, see Pending.Hello) beyond PerSource; when the
// gate is full, the oldest of the source holding the most if it holds
// more than PerSource, else the oldest idle one anywhere. Handshakes in
// progress count against their source only when the gate is full, so
// many honest peers behind one address are not cut while there is room. A flood of idle or half-sent connections thus holds
// at most Max descriptors and goroutines, and each of its connections
// lives only until Max newer ones arrive, while a peer that sends its
// ClientHello at once (within the time Max arrivals take) moves behind
// every idle one and completes its handshake.
//
// A connection counts as idle until its handshake reports its first
// message (Pending.Hello) or, with Spoke set, until the Gate finds that
// message whole in its socket when it looks for one to shed: on a busy
// machine the goroutine that will read it may not have run yet, and a
// peer that spoke at once is not shed for that. With Spoke set, the
// listener may ask TurnAway first, which closes a newcomer to a full
// gate that has been silent since it connected for StaleAfter (it
// waited in the accept queue): the one connection Admit would shed
// soonest, at a fraction of the cost.
//
// The zero value uses the defaults. Safe for concurrent use.
type Gate struct {
	Max       int // default DefaultMaxPending
	PerSource int // default DefaultMaxPendingPerSource
	// Spoke tells, without waiting or reading, whether a connection's
	// whole first message is in its socket (WholeFirstMessage); nil:
	// only Hello tells.
	Spoke func(net.Conn) bool

	mu      sync.Mutex
	waiting list.List // *Pending, oldest first: no whole first message yet
	greeted list.List // *Pending, oldest first: first message in, handshake running
	bySrc   map[netip.Addr][]*Pending
	over    int // sources holding more than PerSource
	shed    uint64
}

// Pending is a connection admitted by a Gate, until Done. Its methods do
// nothing on a nil *Pending (a connection no gate holds).
type Pending struct {
	g       *Gate
	c       net.Conn
	src     netip.Addr
	elem    *list.Element
	greeted bool
	shed    string // why it was shed; "" while it is not
}

// Shed describes a connection a Gate closed to make room.
type Shed struct {
	From   string // the shed connection's remote address
	Reason string // in words, e.g. "shed: 16 handshakes pending from 127.1.0.1 (limit 16)"
}

// ErrShed is the error a handshake sees whose connection the Gate shed
// (wrapped: see Pending.Err).
var ErrShed = errors.New("shed to make room for newer connections")

func (g *Gate) bounds() (int, int) {
	m := g.Max
	if m <= 0 {
		m = DefaultMaxPending
	}
	return m, g.perSource()
}

func (g *Gate) perSource() int {
	if g.PerSource <= 0 {
		return DefaultMaxPendingPerSource
	}
	return g.PerSource
}

// Admit registers an accepted connection as pending and, if that takes
// a bound past its limit, sheds (closes) the oldest pending connection as
// described on Gate, reporting it so the caller can log why.
func (g *Gate) Admit(c net.Conn) (*Pending, *Shed) {
	src := sourceOf(c)
	p := &Pending{g: g, c: c, src: src}
	max, per := g.bounds()
	g.mu.Lock()
	if g.bySrc == nil {
		g.bySrc = map[netip.Addr][]*Pending{}
	}
	victim, reason := g.victimLocked(src, per, max)
	if victim != nil {
		victim.shed = reason
		g.removeLocked(victim)
		g.shed++
	}
	p.elem = g.waiting.PushBack(p)
	g.bySrc[src] = append(g.bySrc[src], p)
	if len(g.bySrc[src]) == per+1 {
		g.over++
	}
	g.mu.Unlock()
	if victim == nil {
		return p, nil
	}
	abort(victim.c)
	return p, &Shed{From: victim.c.RemoteAddr().String(), Reason: "shed the oldest: " + reason}
}

// victimLocked picks the connection to shed for a newcomer from src, or
// nil. A source's idle connections (no whole first message) are bounded
// at per; connections whose handshake runs count against their source
// only once the gate is full, so that one address with many honest
// peers behind it (a NATed site, a node setting up many connections at
// once) is never cut while there is room. When full, the source holding
// the most connections gives up its oldest (idle first) if it holds more
// than per; else the oldest idle connection anywhere goes, else the
// oldest pending one.
func (g *Gate) victimLocked(src netip.Addr, per, max int) (*Pending, string) {
	same := g.bySrc[src]
	if idle := g.oldestIdleLocked(same); idle != nil && countIdle(same) >= per {
		return idle, fmt.Sprintf("%d connections from %s sent nothing whole yet (limit %d per address)", countIdle(same), src, per)
	}
	n := g.waiting.Len() + g.greeted.Len()
	if n < max {
		return nil, ""
	}
	if g.over > 0 { // else no source holds more than per: none to look for
		var top []*Pending
		for _, s := range g.bySrc {
			if len(s) > len(top) {
				top = s
			}
		}
		v := g.oldestIdleLocked(top)
		if v == nil {
			v = top[0]
		}
		return v, fmt.Sprintf("%d handshakes pending in all (limit %d), %d of them from %s", n, max, len(top), v.src)
	}
	return g.oldestLocked(), fmt.Sprintf("%d handshakes pending in all (limit %d)", n, max)
}

// oldestIdleLocked is the first of ps (oldest first) that has not sent
// its whole first message, or nil; those it finds have (spokeLocked) it
// marks greeted on the way.
func (g *Gate) oldestIdleLocked(ps []*Pending) *Pending {
	for _, q := range ps {
		if !q.greeted && !g.spokeLocked(q) {
			return q
		}
	}
	return nil
}

// oldestLocked is the oldest pending connection, idle ones first (those
// found to have spoken marked greeted on the way), or nil.
func (g *Gate) oldestLocked() *Pending {
	for e := g.waiting.Front(); e != nil; e = g.waiting.Front() {
		if p := e.Value.(*Pending); !g.spokeLocked(p) {
			return p
		}
	}
	if e := g.greeted.Front(); e != nil {
		return e.Value.(*Pending)
	}
	return nil
}

// spokeLocked moves an idle connection whose whole first message is in
// its socket (Gate.Spoke) to the greeted ones, and reports whether it
// did.
func (g *Gate) spokeLocked(p *Pending) bool {
	if g.Spoke == nil || p.greeted || !g.Spoke(p.c) {
		return false
	}
	g.helloLocked(p)
	return true
}

func countIdle(ps []*Pending) int {
	n := 0
	for _, q := range ps {
		if !q.greeted {
			n++
		}
	}
	return n
}

// ShedOldest closes the oldest pending connection (idle ones first), as
// Admit does when a bound is reached: what an accept loop out of file
// descriptors does to make room. It reports false if nothing is pending.
func (g *Gate) ShedOldest(reason string) (*Shed, bool) {
	g.mu.Lock()
	victim := g.oldestLocked()
	if victim == nil {
		g.mu.Unlock()
		return nil, false
	}
	victim.shed = reason
	g.removeLocked(victim)
	g.shed++
	g.mu.Unlock()
	abort(victim.c)
	return &Shed{From: victim.c.RemoteAddr().String(), Reason: "shed the oldest: " + reason}, true
}

// abort closes a shed connection with a reset (SO_LINGER 0): no FIN
// exchange, no TIME_WAIT left on this side for each of a flood's
// connections.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

func (g *Gate) removeLocked(p *Pending) {
	if p.elem == nil {
		return
	}
	if p.greeted {
		g.greeted.Remove(p.elem)
	} else {
		g.waiting.Remove(p.elem)
	}
	p.elem = nil
	same := g.bySrc[p.src]
	if len(same) == g.perSource()+1 {
		g.over--
	}
	for i, q := range same {
		if q == p {
			same = append(same[:i:i], same[i+1:]...)
			break
		}
	}
	if len(same) == 0 {
		delete(g.bySrc, p.src)
	} else {
		g.bySrc[p.src] = same
	}
}

// Len returns how many connections are pending.
func (g *Gate) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting.Len() + g.greeted.Len()
}

// Shed returns how many connections the gate has shed.
func (g *Gate) Shed() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.shed
}

// Hello records that the connection's peer sent its whole first message:
// it is shed only after every connection that has not.
func (p *Pending) Hello() {
	if p == nil {
		return
	}
	g := p.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if p.elem != nil && !p.greeted {
		g.helloLocked(p)
	}
}

// helloLocked moves an idle pending connection to the greeted ones.
func (g *Gate) helloLocked(p *Pending) {
	g.waiting.Remove(p.elem)
	p.greeted = true
	p.elem = g.greeted.PushBack(p)
}

// Done releases the connection from the gate (its handshake is over, one
// way or the other). It may be called more than once.
func (p *Pending) Done() {
	if p == nil {
		return
	}
	p.g.mu.Lock()
	p.g.removeLocked(p)
	p.g.mu.Unlock()
}

// Err returns, if the gate shed this connection, an error wrapping ErrShed
// that says why; else nil. A handshake that fails on a shed connection
// failed because of it.
func (p *Pending) Err() error {
	if p == nil {
		return nil
	}
	p.g.mu.Lock()
	defer p.g.mu.Unlock()
	if p.shed == "" {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrShed, p.shed)
}

// sourceOf is the source a connection counts against: its IPv4 address,
// or the /64 of its IPv6 address (one host commonly holds a whole /64).
func sourceOf(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if a, ok := netip.AddrFromSlice(ta.IP); ok {
			a = a.Unmap()
			if a.Is6() {
				p, _ := a.Prefix(64)
				return p.Addr()
			}
			return a
		}
	}
	return netip.Addr{} // pipes and the like: one source
}
