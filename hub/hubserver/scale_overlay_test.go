package hubserver

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/memnet"
	"github.com/gridlink/gridlink/pki"
)

// An overlay of many in-process hubs for the scale harness (make scale,
// scale_test.go) and its small version in make test: hubs on an in-memory
// network (internal/memnet), each at a site drawn in a square, with a
// one-way latency between two hubs in proportion to their sites'
// distance (up to maxOneWay across the square, as between grid sites of
// one continent). Hub i is configured with two earlier hubs as peers and
// learns the rest by gossip. Nodes may attach over the in-memory network
// (in-process nodes) or, with tcp set, over loopback TCP from another
// process (scale_nodes_test.go), so that the hubs' process holds hubs
// only and its memory is theirs.
type overlay struct {
	t         testing.TB
	mem       memnet.Network
	interval  time.Duration
	maxOneWay time.Duration
	tcp       bool
	maxLinks  int // every hub's Config.MaxLinks (0: DefaultMaxLinks, -1: a full mesh)
	logf      func(string, ...any)

	hubs   []*ovHub
	mu     sync.Mutex
	byAddr map[string]int // a hub's in-memory address -> its index (stable across restarts), under mu
	cut    map[int]bool   // hubs whose trunks lose every byte, the end of the stream too (vanish), under mu
}

// ovHub is one hub of the overlay, kept across its lives.
type ovHub struct {
	i       int
	site    [2]float64
	creds   *pki.Credentials
	addr    string // in-memory address, for hubs (and in-process nodes)
	tcpAddr string // loopback TCP address, for nodes of another process ("" unless overlay.tcp)
	peers   []string
	version int // the protocol version it plays (Hub.version), 0: wire.Version

	mu     sync.Mutex
	h      *Hub
	cancel context.CancelFunc
	done   chan error
	past   uint64 // control bytes sent in earlier lives
}

func newOverlay(t testing.TB, n int, interval, maxOneWay time.Duration, tcp bool, maxLinks int) *overlay {
	o := &overlay{t: t, interval: interval, maxOneWay: maxOneWay, tcp: tcp, maxLinks: maxLinks, byAddr: map[string]int{}, cut: map[int]bool{}, logf: func(string, ...any) {}}
	if path := os.Getenv("SCALE_LOG"); path != "" { // make scale SCALE_LOG=file: every hub's log there
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		var mu sync.Mutex
		start := time.Now()
		o.logf = func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(f, "%8.3f "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
		}
	}
	rng := rand.New(rand.NewPCG(23, uint64(n)))
	for i := range n { // all first: running hubs read the list
		o.hubs = append(o.hubs, &ovHub{i: i, site: [2]float64{rng.Float64(), rng.Float64()}, creds: creds(t)})
	}
	for i, oh := range o.hubs {
		if i > 0 {
			oh.peers = append(oh.peers, o.hubs[i-1].addr)
			if j := rng.IntN(i); j != i-1 {
				oh.peers = append(oh.peers, o.hubs[j].addr)
			}
		}
		o.start(i)
	}
	t.Cleanup(func() {
		for _, oh := range o.hubs {
			o.stop(oh.i, false)
		}
	})
	return o
}

// oneWay is the emulated one-way latency between hubs i and j.
func (o *overlay) oneWay(i, j int) time.Duration {
	a, b := o.hubs[i].site, o.hubs[j].site
	d := math.Hypot(a[0]-b[0], a[1]-b[1]) / math.Sqrt2
	return max(time.Duration(d*float64(o.maxOneWay)), 100*time.Microsecond)
}

// start starts hub i (again, with the same key and addresses).
func (o *overlay) start(i int) {
	o.mu.Lock()
	delete(o.cut, i)
	o.mu.Unlock()
	oh := o.hubs[i]
	addr := oh.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	mln, err := o.mem.Listen(addr)
	if err != nil {
		o.t.Fatal(err)
	}
	var ln net.Listener = mln
	if o.tcp {
		taddr := oh.tcpAddr
		if taddr == "" {
			taddr = "127.0.0.1:0"
		}
		tln, err := net.Listen("tcp", taddr)
		if err != nil {
			o.t.Fatal(err)
		}
		oh.tcpAddr = tln.Addr().String()
		ln = bothListeners(mln, tln)
	}
	h, err := New(Config{
		Name:     fmt.Sprintf("h%03d", i),
		Creds:    oh.creds,
		Listener: ln,
		Peers:    oh.peers,
		Interval: o.interval,
		Logf:     o.logf,
		NoSplice: true,
		Lanes:    1,
		MaxLinks: o.maxLinks,
		Dial:     func(ctx context.Context, spec string) (net.Conn, error) { return o.dialFrom(ctx, i, spec) },
	})
	if err != nil {
		o.t.Fatal(err)
	}
	h.version = oh.version
	if oh.addr == "" {
		oh.addr = mln.Addr().String()
		o.mu.Lock()
		o.byAddr[oh.addr] = i
		o.mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx) }()
	oh.mu.Lock()
	oh.h, oh.cancel, oh.done = h, cancel, done
	oh.mu.Unlock()
}

// dialFrom is hub i's dialler: the in-memory network, delayed by the
// latency to the hub dialled.
func (o *overlay) dialFrom(ctx context.Context, i int, spec string) (net.Conn, error) {
	o.mu.Lock()
	j, ok := o.byAddr[spec]
	o.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("overlay: no hub at %s", spec)
	}
	c, err := o.mem.Dial(ctx, spec)
	if err != nil {
		return nil, err
	}
	return delayed(c, o.oneWay(i, j), func() bool { return o.isCut(i) || o.isCut(j) }), nil
}

func (o *overlay) isCut(i int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.cut[i]
}

// vanish kills hub i as a machine or network lost would: from now on its
// trunks lose every byte, and their ends too (no FIN, no reset): the
// other hubs learn it only from the silence. start brings it back.
func (o *overlay) vanish(i int) {
	o.mu.Lock()
	o.cut[i] = true
	o.mu.Unlock()
	o.stop(i, true)
}

// hub is hub i's current life (nil while it is down).
func (o *overlay) hub(i int) *Hub {
	oh := o.hubs[i]
	oh.mu.Lock()
	defer oh.mu.Unlock()
	return oh.h
}

// stop ends hub i: crash kills it as its process dying would (sockets
// closed at once, no word to anyone), else it shuts down cleanly.
func (o *overlay) stop(i int, crash bool) {
	oh := o.hubs[i]
	oh.mu.Lock()
	h, cancel, done := oh.h, oh.cancel, oh.done
	oh.h = nil
	if h != nil {
		oh.past += h.ControlSent()
	}
	oh.mu.Unlock()
	if h == nil {
		return
	}
	if crash {
		h.vanish.Store(true)
		h.ln.Close()
		h.mu.Lock()
		for p := range h.all {
			p.t.Mute()
		}
		for p := range h.all {
			p.t.Conn().Close()
		}
		h.mu.Unlock()
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		o.t.Errorf("hub %d did not stop", i)
	}
}

// controlSent is the control bytes all hubs sent on trunks so far.
func (o *overlay) controlSent() uint64 {
	var n uint64
	for _, oh := range o.hubs {
		oh.mu.Lock()
		n += oh.past
		if oh.h != nil {
			n += oh.h.ControlSent()
		}
		oh.mu.Unlock()
	}
	return n
}

// wrong counts the routes that are not right: every running hub must
// reach every other running hub, and no hub that is down.
func (o *overlay) wrong() int {
	up := map[identity.ID]bool{}
	var running []*Hub
	for _, oh := range o.hubs {
		oh.mu.Lock()
		if oh.h != nil {
			running = append(running, oh.h)
		}
		oh.mu.Unlock()
		up[oh.creds.Key.ID()] = oh.h != nil
	}
	bad := 0
	for _, h := range running {
		reach := map[identity.ID]bool{}
		for _, r := range h.Routes() {
			if r.Reachable() {
				reach[r.Hub] = true
			}
		}
		for id, u := range up {
			if id != h.id && reach[id] != u {
				bad++
			}
		}
	}
	return bad
}

// converge waits until every route is right, polling every step, and
// returns how long that took (from since), or an error after limit.
func (o *overlay) converge(since time.Time, step, limit time.Duration) (time.Duration, error) {
	for {
		n := o.wrong()
		if n == 0 {
			return time.Since(since), nil
		}
		if time.Since(since) > limit {
			return time.Since(since), fmt.Errorf("routes not right after %v: %d wrong", limit, n)
		}
		time.Sleep(step)
	}
}

// delayed is c with every byte delivered d later, both ways: a pipe
// whose far end two pumps join to c, each holding what it read for d.
// While cut says so, both ways lose everything.
func delayed(c net.Conn, d time.Duration, cut func() bool) net.Conn {
	local, remote := c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
	near, far := memnet.Pipe(local, remote)
	go pump(c, far, d, cut)
	go pump(far, c, d, cut)
	return near
}

// pump copies src to dst, each read delivered d after it was read; when
// either side fails both are closed (as a connection's end does), unless
// the path is cut: then bytes and end are lost.
func pump(dst, src net.Conn, d time.Duration, cut func() bool) {
	type chunk struct {
		at time.Time
		b  []byte
	}
	ch := make(chan chunk, 256)
	go func() {
		defer close(ch)
		buf := make([]byte, 16<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{time.Now().Add(d), append([]byte(nil), buf[:n]...)}
			}
			if err != nil {
				ch <- chunk{time.Now().Add(d), nil} // the end, delayed like the bytes
				return
			}
		}
	}()
	for c := range ch {
		time.Sleep(time.Until(c.at))
		if cut() {
			continue
		}
		if c.b == nil {
			break
		}
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	if !cut() {
		dst.Close()
	}
	src.Close()
	for range ch { // let the reader end
	}
}

// twoListeners accepts from two listeners as one (hubs on the in-memory
// network, nodes on loopback TCP); its address is the first's.
type twoListeners struct {
	a, b net.Listener
	ch   chan net.Conn
	once sync.Once
	done chan struct{}
}

func bothListeners(a, b net.Listener) *twoListeners {
	l := &twoListeners{a: a, b: b, ch: make(chan net.Conn), done: make(chan struct{})}
	for _, ln := range []net.Listener{a, b} {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				select {
				case l.ch <- c:
				case <-l.done:
					c.Close()
					return
				}
			}
		}()
	}
	return l
}

func (l *twoListeners) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: net.ErrClosed}
	}
}

func (l *twoListeners) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.a.Close()
		l.b.Close()
	})
	return nil
}

func (l *twoListeners) Addr() net.Addr { return l.a.Addr() }
