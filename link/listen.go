package link

import (
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
}

type accepted struct {
	c       *Conn
	streams int
	ready   chan struct{} // closed once the link carries blocks, or failed to
}

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
	h, err := readHello(vc)
	_ = vc.SetReadDeadline(time.Time{})
	if err != nil {
		if errors.Is(err, ErrHello) {
			l.refuse(vc, err.Error())
		}
		vc.Close()
		return
	}
	if h.kind == helloJoin {
		l.join(vc, h)
		return
	}
	if h.flags&flagPlain != 0 && !l.o.AllowPlain {
		l.refuse(vc, fmt.Sprintf("%s accepts only encrypted links (the listener does not allow plain)", vc.LocalAddr()))
		vc.Close()
		return
	}
	c := &Conn{first: vc, id: h.link, plain: h.flags&flagPlain != 0, comp: h.compress, conns: []*vconn.Conn{vc}}
	blocks := h.flags&flagBlocks != 0
	var a *accepted
	if blocks {
		// Registered before the reply, so that the joins the reply lets
		// the dialler send find the link; they wait for ready.
		a = &accepted{c: c, streams: 1, ready: make(chan struct{})}
		defer close(a.ready)
		l.mu.Lock()
		l.links[h.link] = a
		l.mu.Unlock()
		c.onClose = func() {
			l.mu.Lock()
			delete(l.links, h.link)
			l.mu.Unlock()
		}
	}
	if h.flags&flagNoReply != 0 {
		vc.KeepTLS()
	} else if !l.agree(vc, h) {
		c.Close()
		return
	}
	if blocks {
		cfg := l.o.Config
		cfg.Compression = h.compress
		c.startBlocks(cfg) // only now: the reply and Clear are done
	}
	select {
	case l.queue <- c:
	case <-l.done:
		c.Close()
	}
}

// agree sends an OK reply and leaves TLS if the link is plain.
func (l *Listener) agree(vc *vconn.Conn, h hello) bool {
	r := reply{status: replyOK, flags: h.flags & flagPlain}
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

func (l *Listener) refuse(vc *vconn.Conn, reason string) {
	_ = vc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _ = vc.Write(reply{status: replyRefused, reason: reason}.append(nil))
}

// join adds a connection to the link its hello names, if the same peer
// opened it and it may have one more stream.
func (l *Listener) join(vc *vconn.Conn, h hello) {
	l.mu.Lock()
	a := l.links[h.link]
	var reason string
	switch {
	case a == nil:
		reason = fmt.Sprintf("no link %s here (closed, or never opened)", h.link)
	case a.c.first.Peer().ID != vc.Peer().ID:
		reason = fmt.Sprintf("link %s belongs to another peer", h.link)
	case (h.flags&flagPlain != 0) != a.c.plain:
		reason = fmt.Sprintf("link %s is plain=%v, the join says plain=%v", h.link, a.c.plain, h.flags&flagPlain != 0)
	case a.streams >= l.o.MaxStreams:
		reason = fmt.Sprintf("link %s has %d streams, the most this listener allows", h.link, a.streams)
	default:
		a.streams++
	}
	l.mu.Unlock()
	if reason != "" {
		l.refuse(vc, reason)
		vc.Close()
		return
	}
	if !l.agree(vc, h) {
		vc.Close()
		l.mu.Lock()
		a.streams--
		l.mu.Unlock()
		return
	}
	<-a.ready
	_ = a.c.attach(vc)
}
