package link

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

// ListenOptions are an acceptor's link policy. The zero value accepts
// encrypted links of up to DefaultMaxStreams streams with any compression.
type ListenOptions struct {
	// AllowPlain accepts links that leave TLS after the handshake
	// (Options.Plain). Off by default: the listener's data stays private
	// unless it says otherwise.
	AllowPlain bool
	// MaxStreams bounds the streams of each link (default
	// DefaultMaxStreams): a join beyond it is refused.
	MaxStreams int
	// Config tunes blocks and buffers of links with blocks; the dialler's
	// compression replaces its Compression.
	Config Config
	// HelloTimeout bounds the wait for a new connection's hello (default
	// 30s).
	HelloTimeout time.Duration
	// Allow admits the dialers it returns nil for (access control by
	// subject or group, e.g. pki.Members); nil: every member of the grid.
	// Its refusal reaches the dialler as the reason.
	Allow func(pki.Peer) error
	// NoResume answers a dialler asking for a resumable link
	// (Options.Resume) with a link that is not. Off: links are resumable
	// when the dialler asks, with the smaller of both ends'
	// Config.ResendBuffer as window and the smaller of both ends'
	// Config.ResumeTimeout as how long both ends wait for the dialler to
	// set a connection up again.
	NoResume bool
	// Logf, if set, logs each connection the listener refuses, with the
	// reason the dialler reads.
	Logf func(format string, args ...any)
}

// Listener accepts links on a virtual port: Accept returns each new link
// once; the further connections of a link join it without Accept.
type Listener struct {
	l     *vconn.Listener
	o     ListenOptions
	queue chan *Conn
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup

	mu    sync.Mutex
	links map[LinkID]*accepted

	// legacy makes the listener read hellos as it did before resumable
	// links (flagResume is an unknown flag), to test old peers.
	legacy bool
}

type accepted struct {
	c       *Conn
	streams int
	ready   chan struct{} // closed once the link carries blocks, or failed to
	once    sync.Once
	resume  bool            // the link is resumable
	token   [tokenSize]byte // its resume token
	joining int             // resumable: joins agreed, not yet attached
}

func (a *accepted) markReady() { a.once.Do(func() { close(a.ready) }) }

// Listen listens for links on a port of node n (0: a free port).
func Listen(n *vconn.Node, port uint16, o ListenOptions) (*Listener, error) {
	vl, err := n.ListenAllow(port, o.Allow)
	if err != nil {
		return nil, err
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.HelloTimeout <= 0 {
		o.HelloTimeout = 30 * time.Second
	}
	l := &Listener{l: vl, o: o, queue: make(chan *Conn), done: make(chan struct{}), links: map[LinkID]*accepted{}}
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

// Accept returns the next new link.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.queue:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting; links already accepted go on.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	err := l.l.Close()
	l.wg.Wait()
	return err
}

// Addr is the listener's virtual address.
func (l *Listener) Addr() net.Addr { return l.l.Addr() }

func (l *Listener) serve() {
	defer l.wg.Done()
	for {
		c, err := l.l.Accept()
		if err != nil {
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.handle(c.(*vconn.Conn))
		}()
	}
}

// handle reads a connection's hello and opens or joins a link.
func (l *Listener) handle(vc *vconn.Conn) {
	_ = vc.SetReadDeadline(time.Now().Add(l.o.HelloTimeout))
	h, err := readHello(vc, l.legacy)
	_ = vc.SetReadDeadline(time.Time{})
	if err != nil {
		if errors.Is(err, ErrHello) {
			l.refuse(vc, err.Error(), 0)
		}
		vc.Close()
		return
	}
	if h.kind == helloJoin {
		l.join(vc, h)
		return
	}
	if h.flags&flagPlain != 0 && !l.o.AllowPlain {
		l.refuse(vc, fmt.Sprintf("%s accepts only encrypted links (the listener does not allow plain)", vc.LocalAddr()), h.flags)
		vc.Close()
		return
	}
	c := &Conn{first: vc, id: h.link, plain: h.flags&flagPlain != 0, comp: h.compress, conns: []*vconn.Conn{vc}}
	blocks := h.flags&flagBlocks != 0
	resume := h.flags&flagResume != 0 && !l.o.NoResume
	window := 0
	var timeout time.Duration
	if resume {
		c.token = h.token
		d := l.o.Config.withDefaults()
		window = min(int(h.window), d.ResendBuffer)
		timeout = min(time.Duration(h.timeout)*time.Millisecond, d.ResumeTimeout)
	}
	var a *accepted
	if blocks {
		// Registered before the reply, so that the joins the reply lets
		// the dialler send find the link; they wait for ready.
		a = &accepted{c: c, streams: 1, ready: make(chan struct{}), resume: resume, token: h.token}
		defer a.markReady()
		l.mu.Lock()
		_, taken := l.links[h.link]
		if !taken {
			l.links[h.link] = a
		}
		l.mu.Unlock()
		if taken {
			// Another's link must not be replaced: its joins (and
			// resumes) would then be refused.
			l.refuse(vc, fmt.Sprintf("link %s is in use", h.link), h.flags)
			vc.Close()
			return
		}
		c.onClose = func() {
			l.mu.Lock()
			if l.links[h.link] == a {
				delete(l.links, h.link)
			}
			l.mu.Unlock()
		}
	}
	if h.flags&flagNoReply != 0 {
		vc.KeepTLS()
	} else if !l.agree(vc, h, window, timeout) {
		c.Close()
		return
	}
	if blocks {
		cfg := l.o.Config
		cfg.Compression = h.compress
		// only now: the reply and Clear are done
		if resume {
			cfg.ResumeTimeout = timeout
			c.startResumable(cfg, window, nil)
		} else {
			c.startBlocks(cfg)
		}
		a.markReady()
	}
	select {
	case l.queue <- c:
	case <-l.done:
		c.Close()
	}
}

// agree sends an OK reply (resumable with window and timeout, unless
// window is 0) and leaves TLS if the link is plain.
func (l *Listener) agree(vc *vconn.Conn, h hello, window int, timeout time.Duration) bool {
	r := reply{status: replyOK, flags: h.flags & flagPlain}
	if window > 0 {
		r.flags |= flagResume
		r.window = uint32(window)
		r.timeout = uint32(timeout / time.Millisecond)
	}
	_ = vc.SetWriteDeadline(time.Now().Add(l.o.HelloTimeout))
	_, err := vc.Write(r.append(nil))
	_ = vc.SetWriteDeadline(time.Time{})
	if err != nil {
		return false
	}
	if h.flags&flagPlain != 0 {
		return vc.Clear() == nil
	}
	vc.KeepTLS()
	return true
}

// refuse refuses a connection for reason, which the dialler reads and
// Logf logs; helloFlags are the hello's, if it was read (a refusal of a
// hello asking for resume says that this end knows resumable links).
func (l *Listener) refuse(vc *vconn.Conn, reason string, helloFlags byte) {
	if l.o.Logf != nil {
		l.o.Logf("link: %s refused a connection from %s: %s", vc.LocalAddr(), vc.Peer(), reason)
	}
	_ = vc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _ = vc.Write(reply{status: replyRefused, flags: helloFlags & flagResume, reason: reason}.append(nil))
}

// join adds a connection to the link its hello names, if the same peer
// opened it and it may have one more stream.
func (l *Listener) join(vc *vconn.Conn, h hello) {
	l.mu.Lock()
	a := l.links[h.link]
	l.mu.Unlock()
	if a != nil && a.resume {
		// A resumable link counts the connections it has now: wait for
		// it to have them.
		<-a.ready
	}
	l.mu.Lock()
	var reason string
	switch {
	case a == nil:
		reason = fmt.Sprintf("no link %s here (closed, or never opened)", h.link)
	case a.c.first.Peer().ID != vc.Peer().ID:
		reason = fmt.Sprintf("link %s belongs to another peer", h.link)
	case a.resume && h.flags&flagResume == 0:
		reason = fmt.Sprintf("link %s is resumable: a join must present its resume token", h.link)
	case !a.resume && h.flags&flagResume != 0:
		reason = fmt.Sprintf("link %s is not resumable", h.link)
	case a.resume && subtle.ConstantTimeCompare(h.token[:], a.token[:]) != 1:
		reason = fmt.Sprintf("wrong resume token for link %s", h.link)
	case (h.flags&flagPlain != 0) != a.c.plain:
		reason = fmt.Sprintf("link %s is plain=%v, the join says plain=%v", h.link, a.c.plain, h.flags&flagPlain != 0)
	case a.resume && a.c.rs == nil:
		reason = fmt.Sprintf("link %s failed to start", h.link)
	case a.resume && a.c.rs.connections()+a.joining >= l.o.MaxStreams:
		reason = fmt.Sprintf("link %s has %d streams, the most this listener allows", h.link, a.c.rs.connections()+a.joining)
	case !a.resume && a.streams >= l.o.MaxStreams:
		reason = fmt.Sprintf("link %s has %d streams, the most this listener allows", h.link, a.streams)
	case a.resume:
		a.joining++
	default:
		a.streams++
	}
	l.mu.Unlock()
	if reason != "" {
		l.refuse(vc, reason, h.flags)
		vc.Close()
		return
	}
	ok := l.agree(vc, h, 0, 0)
	if ok {
		<-a.ready
		ok = a.c.attach(vc) == nil
	} else {
		vc.Close()
	}
	l.mu.Lock()
	switch {
	case a.resume:
		a.joining--
	case !ok:
		a.streams--
	}
	l.mu.Unlock()
}
