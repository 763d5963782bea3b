package link

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/vconn"
)

// Auto as Options.Streams grows the number of streams while throughput
// grows (see tune.go).
const Auto = -1

// DefaultMaxStreams bounds the streams of a link unless Options.MaxStreams
// or ListenOptions.MaxStreams say otherwise.
const DefaultMaxStreams = 64

// Options are a dialler's link options. The zero value is one stream,
// encrypted, without compression: a plain virtual connection with a
// 24-byte hello in front and no wait for a reply.
type Options struct {
	// Streams is the number of parallel connections: 0 or 1 for one, N
	// for N, Auto to start with one and grow while throughput grows.
	Streams int
	// MaxStreams bounds Auto and N (default DefaultMaxStreams); the
	// acceptor may bound them lower (ListenOptions.MaxStreams).
	MaxStreams int
	// Compression, for both directions (default off).
	Compression Compression
	// Plain asks for authenticated plain: the TLS handshake proves both
	// ends as always, then the data travels in the clear, unprotected,
	// for speed. The acceptor must allow it (ListenOptions.AllowPlain).
	Plain bool
	// Config tunes the blocks and buffers of a link with several streams
	// or compression; Compression above overrides its Compression.
	// ResendBuffer and ResumeTimeout tune a resumable link.
	Config Config
	// Resume asks for a resumable link (resume.go): one that survives the
	// loss of its connections, resending what they carried on others set
	// up again (Redial), for up to Config.ResumeTimeout without any. It
	// always carries blocks, and waits for the acceptor's reply (a round
	// trip before the first byte that a one-stream link without
	// compression does not wait). Off by default. An acceptor that does
	// not know resumable links (older) or refuses them
	// (ListenOptions.NoResume) gets one that is not: see Resumable.
	Resume bool
	// Redial sets up another connection to the same listener, for a
	// resumable link that lost its connections and for the further
	// streams of any link; package link then sends the join handshake
	// on it. nil: the node dials the link's address again, by whatever
	// method works now (vconn.Node.Dial: the name looked up again if
	// the peer moved to another hub), to the same peer only.
	Redial func(ctx context.Context) (*vconn.Conn, error)

	// Upgrade, on a resumable link set up by a method other than direct,
	// looks for a more direct connection to the peer while the link runs
	// and moves to it (upgrade.go). Off by default.
	Upgrade bool

	blocks      bool                                                               // carry blocks even over one stream without compression (benchmarks)
	upgradeDial func(ctx context.Context, via []vconn.Method) (*vconn.Conn, error) // tests: Upgrade's dial
	afterSpare  bool                                                               // Dial's second try, after a spare cut in the hello
}

func (o Options) maxStreams() int {
	if o.MaxStreams <= 0 {
		return DefaultMaxStreams
	}
	return o.MaxStreams
}

// blocks says whether the link needs blocks: several streams (or maybe
// several, with Auto) or compression.
func (o Options) needBlocks() bool {
	return o.Streams > 1 || o.Streams == Auto || o.Compression != CompressOff || o.blocks
}

// A link the acceptor refused fails with a *direct.RefusedError (What
// direct.RefusedLink; errors.Is direct.ErrRefused), its End the
// acceptor's address and its Reason the acceptor's words.

// Conn is a link: one two-way byte stream over one or several virtual
// connections to the same peer and port. It is a net.Conn.
//
// A link of one stream without compression is the virtual connection
// itself (TLS or in the clear). Otherwise each direction is striped over
// all the connections in blocks (Writer, Reader); a connection that fails
// fails the link (Read and Write report it, naming the connection), never
// silently truncates it.
type Conn struct {
	first *vconn.Conn
	id    LinkID
	plain bool
	comp  Compression

	// with blocks
	w *Writer
	r *Reader

	// resumable (resume.go)
	rs     *session
	token  [tokenSize]byte
	redial func(ctx context.Context) (*vconn.Conn, error) // Options.Redial, or the node's
	window int

	mu      sync.Mutex
	conns   []*vconn.Conn
	refused error // why the acceptor stopped taking streams (a *direct.RefusedError)
	closed  bool
	onClose func()
	tune    *tuner
	up      *upgrader // Options.Upgrade
	joinErr error     // the last failed join, for Stats
}

// Dial sets up a link to addr (NODE:PORT[@HUB], see vconn.Node.Dial) with
// options o. With several streams it returns once all have joined (or
// failed to: the link goes on with those that did); with Auto, after the
// first, growing from there in the background.
func Dial(ctx context.Context, n *vconn.Node, addr string, o Options) (*Conn, error) {
	c0, err := n.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	var id LinkID
	_, _ = rand.Read(id[:])
	h := hello{kind: helloOpen, compress: o.Compression, link: id}
	blocks := o.needBlocks() || o.Resume
	switch {
	case o.Plain:
		h.flags |= flagPlain
	case !blocks:
		h.flags |= flagNoReply
	}
	if blocks {
		h.flags |= flagBlocks
	}
	cfg := o.Config
	cfg.Compression = o.Compression
	if o.Resume {
		h.flags |= flagResume
		_, _ = rand.Read(h.token[:])
		d := cfg.withDefaults()
		h.window = uint32(d.ResendBuffer)
		h.timeout = uint32(d.ResumeTimeout / time.Millisecond)
	}
	start := time.Now()
	c := &Conn{first: c0, id: id, plain: o.Plain, comp: o.Compression, conns: []*vconn.Conn{c0}, token: h.token, redial: o.Redial}
	if c.redial == nil {
		c.redial = redialer(n, addr, c0.Peer())
	}
	rep, err := c.greet(ctx, c0, h)
	if err != nil {
		c0.Close()
		if c0.Spare() && !o.afterSpare && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
			// A spare connection, judged by the acceptor when it was set
			// up, cut as the link opened: the acceptor has since learnt
			// that this end is no longer admitted (a revocation's news)
			// or the spare's end went. Once more: a fresh setup is
			// judged now, and refused naming why (CI: 2 in 60 revoked
			// execs said only EOF).
			o.afterSpare = true
			return Dial(ctx, n, addr, o)
		}
		if o.Resume && errors.Is(err, direct.ErrRefused) && rep.flags&flagResume == 0 {
			// An acceptor that predates resumable links: it refused
			// the flag. Open the link again without it.
			o.Resume = false
			return Dial(ctx, n, addr, o)
		}
		return nil, err
	}
	if !blocks {
		return c, nil
	}
	if rep.flags&flagResume != 0 {
		if rep.window > h.window {
			c0.Close()
			return nil, fmt.Errorf("link to %s: %w: the acceptor answered a window of %d to %d", c0.RemoteAddr(), ErrHello, rep.window, h.window)
		}
		if rep.timeout > h.timeout {
			c0.Close()
			return nil, fmt.Errorf("link to %s: %w: the acceptor answered a resume timeout of %d ms to %d", c0.RemoteAddr(), ErrHello, rep.timeout, h.timeout)
		}
		cfg.ResumeTimeout = time.Duration(rep.timeout) * time.Millisecond
		c.startResumable(cfg, int(rep.window), c.redialJoin)
		if o.Upgrade {
			dial := o.upgradeDial
			if dial == nil {
				peer, port := c0.Peer(), c0.RemoteAddr().(vconn.Addr).Port
				dial = func(ctx context.Context, via []vconn.Method) (*vconn.Conn, error) {
					return n.DialMachineVia(ctx, peer, port, via...)
				}
			}
			c.startUpgrade(dial)
		}
	} else {
		c.startBlocks(cfg)
	}
	rtt := time.Since(start)
	switch {
	case o.Streams == Auto:
		c.tune = startTuner(dialled{c, n}, rtt, o.maxStreams())
	case o.Streams > 1:
		c.join(ctx, n, min(o.Streams, o.maxStreams())-1)
	}
	return c, nil
}

// redialer is a link's redial unless Options.Redial says otherwise: addr
// dialled again, by whatever method works now. The name is looked up
// again when the peer's hub or addresses changed (the hub it was attached
// to died: vconn.Node.Dial); a name that now names another node is
// refused, the link's token going nowhere but to its peer.
func redialer(n *vconn.Node, addr string, peer identity.Machine) func(context.Context) (*vconn.Conn, error) {
	return func(ctx context.Context) (*vconn.Conn, error) {
		vc, err := n.Dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		if vc.Peer().ID != peer.ID {
			vc.Close()
			return nil, &direct.RefusedError{What: direct.RefusedLink, End: addr, Peer: vc.Peer().ID, Here: true,
				Reason: fmt.Sprintf("%s now names node %s, not the link's peer %s", addr, vc.Peer().ID.Short(), peer.ID.Short())}
		}
		return vc, nil
	}
}

// startResumable makes the link carry blocks over its first connection
// as a resumable link with window (see resume.go); redial is nil on the
// accepting end.
func (c *Conn) startResumable(cfg Config, window int, redial func(context.Context) (net.Conn, error)) {
	cfg.Retired = c.retired
	s := newSession(c.id, cfg, window, redial, c.first)
	c.mu.Lock()
	c.rs, c.window, c.w, c.r = s, window, s.w, s.r
	c.mu.Unlock()
}

// joinHello is the hello of a further connection of the link.
func (c *Conn) joinHello() hello {
	h := hello{kind: helloJoin, flags: flagBlocks, compress: c.comp, link: c.id}
	if c.plain {
		h.flags |= flagPlain
	}
	if c.rs != nil {
		h.flags |= flagResume
		h.token = c.token
	}
	return h
}

// redialJoin is a resumable link's redial: a connection set up again and
// joined to the link.
func (c *Conn) redialJoin(ctx context.Context) (net.Conn, error) {
	vc, err := c.redial(ctx)
	if err != nil {
		return nil, fmt.Errorf("link %s: setting a connection up again: %w", c.id, err)
	}
	if _, err := c.greet(ctx, vc, c.joinHello()); err != nil {
		vc.Close()
		return nil, err
	}
	c.mu.Lock()
	c.conns = append(c.conns, vc)
	c.mu.Unlock()
	return vc, nil
}

// greet sends h on vc and, unless h says not to wait, reads the reply and
// leaves TLS if the link is plain. It returns the reply, also when it
// refused the link.
func (c *Conn) greet(ctx context.Context, vc *vconn.Conn, h hello) (reply, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = vc.SetDeadline(dl)
		defer vc.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { _ = vc.SetDeadline(time.Now()) })
	defer stop()
	if _, err := vc.Write(h.append(nil)); err != nil {
		return reply{}, fmt.Errorf("link to %s: sending hello: %w", vc.RemoteAddr(), err)
	}
	if h.flags&flagNoReply != 0 {
		vc.KeepTLS()
		return reply{}, nil
	}
	r, err := readReply(vc)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return reply{}, fmt.Errorf("link to %s: %w", vc.RemoteAddr(), err)
	}
	if r.status == replyRefused {
		return r, &direct.RefusedError{What: direct.RefusedLink, End: vc.RemoteAddr().String(), Peer: vc.Peer().ID, Reason: r.reason}
	}
	if (r.flags&flagPlain != 0) != (h.flags&flagPlain != 0) {
		return r, fmt.Errorf("link to %s: %w: the acceptor answered plain=%v to plain=%v", vc.RemoteAddr(), ErrHello, r.flags&flagPlain != 0, h.flags&flagPlain != 0)
	}
	if r.flags&flagResume != 0 && h.flags&flagResume == 0 {
		return r, fmt.Errorf("link to %s: %w: the acceptor answered resumable to a hello that did not ask", vc.RemoteAddr(), ErrHello)
	}
	if h.flags&flagPlain != 0 {
		if err := vc.Clear(); err != nil {
			return r, fmt.Errorf("link to %s: %w", vc.RemoteAddr(), err)
		}
	} else {
		vc.KeepTLS()
	}
	return r, nil
}

// startBlocks makes the link carry blocks over its first connection.
func (c *Conn) startBlocks(cfg Config) {
	cfg.Retired = c.retired
	s, r := newDuplex(c.first)
	c.mu.Lock()
	c.w = NewWriter(cfg, s)
	c.r = NewReader(cfg, r)
	c.mu.Unlock()
}

// retired answers the peer's retiring a connection by retiring our
// sending half of it too.
func (c *Conn) retired(recv net.Conn) {
	h, ok := recv.(*half)
	if !ok {
		return
	}
	go func() { _ = c.w.RemoveStream(h.d.sendHalf) }()
}

// join adds k connections in parallel and waits for them.
func (c *Conn) join(ctx context.Context, n *vconn.Node, k int) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	added := 0
	for range k {
		wg.Go(func() {
			if err := c.joinOne(ctx, n); err != nil {
				c.mu.Lock()
				c.joinErr = err
				c.mu.Unlock()
				return
			}
			mu.Lock()
			added++
			mu.Unlock()
		})
	}
	wg.Wait()
	return added
}

// joinOne sets up one more connection of the link.
func (c *Conn) joinOne(ctx context.Context, n *vconn.Node) error {
	c.mu.Lock()
	refused, closed := c.refused, c.closed
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if refused != nil {
		return refused
	}
	vc, err := c.redial(ctx)
	if err != nil {
		return fmt.Errorf("link %s: another stream: %w", c.id, err)
	}
	if _, err := c.greet(ctx, vc, c.joinHello()); err != nil {
		vc.Close()
		if errors.Is(err, direct.ErrRefused) {
			c.mu.Lock()
			c.refused = err
			c.mu.Unlock()
		}
		return err
	}
	return c.attach(vc)
}

// Join adds vc, a connection the caller set up to the link's peer and
// port (say a direct one found while the link runs routed), to a link
// that carries blocks: it sends the join handshake on it, and the link
// carries blocks over it too. With a resumable link the caller may then
// close a connection it no longer wants (the routed one): what that one
// carried unacknowledged goes again over the others, nothing is lost.
func (c *Conn) Join(ctx context.Context, vc *vconn.Conn) error {
	if c.w == nil {
		return errors.New("link: a link of one stream without blocks takes no further connections")
	}
	if vc.Peer().ID != c.first.Peer().ID {
		return fmt.Errorf("link %s: the connection goes to %s, the link to %s", c.id, vc.Peer(), c.first.Peer())
	}
	if _, err := c.greet(ctx, vc, c.joinHello()); err != nil {
		vc.Close()
		return err
	}
	return c.attach(vc)
}

// attach makes vc carry blocks both ways. If the link is closing, vc
// carries none: its sending half says so with a retire block.
func (c *Conn) attach(vc *vconn.Conn) error {
	c.mu.Lock()
	if c.closed || c.w == nil {
		c.mu.Unlock()
		vc.Close()
		return ErrClosed
	}
	c.conns = append(c.conns, vc)
	rs := c.rs
	c.mu.Unlock()
	if rs != nil {
		if err := rs.add(vc); err != nil {
			vc.Close()
			return err
		}
		return nil
	}
	s, r := newDuplex(vc)
	if err := c.r.AddStream(r); err != nil {
		vc.Close()
		return err
	}
	if err := c.w.AddStream(s); err != nil {
		_ = vc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = vc.Write(AppendBlock(nil, Header{Kind: KindRetire}, nil))
		_ = s.Close()
	}
	return nil
}

// Read reads the link's next bytes.
func (c *Conn) Read(p []byte) (int, error) {
	if c.r == nil {
		return c.first.Read(p)
	}
	return c.r.Read(p)
}

// Write sends p.
func (c *Conn) Write(p []byte) (int, error) {
	if c.w == nil {
		return c.first.Write(p)
	}
	return c.w.Write(p)
}

// CloseWrite ends this direction: the peer reads everything written, then
// EOF. It waits until every block is sent; on a resumable link it returns
// at once (the blocks go as the window allows, and Close waits for the
// peer's acks).
func (c *Conn) CloseWrite() error {
	if c.w == nil {
		return c.first.CloseWrite()
	}
	return c.w.Close()
}

// Close sends what was written (as CloseWrite does, giving up after
// lingerTimeout if the peer does not read) and closes every connection,
// once it has read their last blocks if the peer had ended its direction.
// A resumable link waits (as long) until the peer acknowledged the whole
// stream, resuming meanwhile if need be, then closes as resume.go says:
// once both streams are whole it returns, and the link lingers in the
// background until the peer said it is done too (at most 5 s connected);
// if the peer is still sending, it aborts the peer's link, saying so.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	conns := append([]*vconn.Conn(nil), c.conns...)
	onClose := c.onClose
	up := c.up
	c.mu.Unlock()
	if c.tune != nil {
		c.tune.stop()
	}
	up.halt()
	if c.rs != nil {
		// The listener finds the link for joins until it has stopped:
		// the peer may need to resume it to close it.
		return c.rs.close(lingerTimeout, onClose)
	}
	if onClose != nil {
		onClose()
	}
	if c.w == nil {
		return c.first.Close()
	}
	for _, vc := range conns {
		_ = vc.SetWriteDeadline(time.Now().Add(lingerTimeout))
	}
	err := c.w.Close()
	if errors.Is(err, ErrClosed) {
		err = nil // CloseWrite came first
	}
	c.r.awaitEnds(5 * time.Second)
	c.r.Close() // each connection closes as its two halves are done
	return err
}

// lingerTimeout bounds how long Close waits for the peer.
const lingerTimeout = 30 * time.Second

// LocalAddr is this end's virtual address (of the first connection).
func (c *Conn) LocalAddr() net.Addr { return c.first.LocalAddr() }

// RemoteAddr is the peer's virtual address.
func (c *Conn) RemoteAddr() net.Addr { return c.first.RemoteAddr() }

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline bounds Read.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.r == nil {
		return c.first.SetReadDeadline(t)
	}
	return c.r.SetReadDeadline(t)
}

// SetWriteDeadline bounds Write.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if c.w == nil {
		return c.first.SetWriteDeadline(t)
	}
	return c.w.SetWriteDeadline(t)
}

// Method is how the first connection was set up (the others are set up
// the same way, unless the network changed).
func (c *Conn) Method() vconn.Method { return c.first.Method() }

// First is the virtual connection the link began with.
func (c *Conn) First() *vconn.Conn { return c.first }

// Encrypted says whether the link's bytes travel inside TLS.
func (c *Conn) Encrypted() bool { return !c.plain }

// ID is the link's ID.
func (c *Conn) ID() LinkID { return c.id }

// Resumable says whether the link survives the loss of its connections
// (Options.Resume, agreed by the acceptor).
func (c *Conn) Resumable() bool { return c.rs != nil }

// Stats describes a link.
type Stats struct {
	Streams     int // connections carrying blocks now (1 without blocks)
	Compression Compression
	Encrypted   bool
	Writer      WriterStats // zero without blocks
	Reader      ReaderStats // zero without blocks
	// JoinError is why the last stream that failed to join did.
	JoinError string
	// Resumable links: the window agreed in the hello (0: not resumable)
	// and the resume timeout.
	Window        int
	ResumeTimeout time.Duration
	// Switches are the link's live path upgrades (Options.Upgrade).
	Switches []PathSwitch
}

// Stats returns the link's counters.
func (c *Conn) Stats() Stats {
	st := Stats{Streams: 1, Compression: c.comp, Encrypted: !c.plain}
	if c.w != nil {
		st.Writer = c.w.Stats()
		st.Reader = c.r.Stats()
		st.Streams = len(st.Writer.Streams)
	}
	c.mu.Lock()
	if c.joinErr != nil {
		st.JoinError = c.joinErr.Error()
	}
	st.Window = c.window
	if c.rs != nil {
		st.ResumeTimeout = c.rs.timeout
	}
	up := c.up
	c.mu.Unlock()
	if up != nil {
		up.mu.Lock()
		st.Switches = append([]PathSwitch(nil), up.switches...)
		up.mu.Unlock()
	}
	return st
}

func (c *Conn) String() string {
	mode := "tls"
	if c.plain {
		mode = "plain"
	}
	return fmt.Sprintf("link %s %s -> %s (%s, %s, %d streams, compression %s)", c.id, c.LocalAddr(), c.RemoteAddr(), c.Method(), mode, c.Stats().Streams, c.comp)
}
