package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/vconn"
)

// Stream requests turn a control connection into a byte stream, so that
// programs outside the agent (gridlink nc, forward, socks) use the agent's
// node instead of starting their own:
//
//	POST /connect  ConnectRequest  → 101 naming the stream (Gridlink-Stream:
//	                                 ID), then the overlay link's bytes;
//	                                 GET /stream/ID/end then says why they
//	                                 ended (streamend.go)
//	POST /bind     BindRequest     → 101, {"bound":ADDR}, when the peer comes
//	                                 {"peer":ADDR}, then its bytes
//	POST /expose   ExposeRequest   → 101, {"bound":ADDR}; every link accepted
//	                                 there is joined to a new TCP connection to
//	                                 Local, until the client closes
//
// A request carries "Connection: Upgrade" and "Upgrade: " + StreamProto; a
// failure before the upgrade is an HTTP error whose body is a JSON
// StreamError. After the upgrade the agent sends event lines (event.go),
// then raw bytes; a connect may instead hand the agent its local end as
// file descriptors, for the agent to copy itself (handoff.go). A bind
// whose client sends anything, or closes, before {"peer"} is cancelled;
// so is an expose whose client closes.
const StreamProto = "gridlink-stream"

// GridDomain is the pseudo-domain of overlay names: NAME.grid:PORT is the
// node NAME's port, as SOCKS clients and ssh write it.
const GridDomain = ".grid"

// LinkOptions are the link options a stream request asks for (see
// link.Options).
type LinkOptions struct {
	Streams     int    `json:"streams,omitempty"`     // 0/1: one, N, or link.Auto
	MaxStreams  int    `json:"max_streams,omitempty"` // default link.DefaultMaxStreams
	Compression string `json:"compression,omitempty"` // off, s2, zstd, auto
	Plain       bool   `json:"plain,omitempty"`       // authenticated plain
}

func (o LinkOptions) link() (link.Options, error) {
	lo := link.Options{Streams: o.Streams, MaxStreams: o.MaxStreams, Plain: o.Plain}
	if o.Compression != "" {
		c, err := link.ParseCompression(o.Compression)
		if err != nil {
			return lo, err
		}
		lo.Compression = c
	}
	return lo, nil
}

// ConnectRequest is the body of POST /connect.
type ConnectRequest struct {
	// Addr is a virtual address NODE[.grid]:PORT[@HUB]; with Exit, a TCP
	// HOST:PORT that the exit node dials.
	Addr string      `json:"addr"`
	Exit string      `json:"exit,omitempty"` // node whose agent allows exits (see exit.go)
	Link LinkOptions `json:"link"`
	// Handoff offers the local end of the stream as file descriptors
	// after the upgrade (handoff.go), for the agent to copy itself.
	Handoff bool `json:"handoff,omitempty"`
}

// BindRequest is the body of POST /bind.
type BindRequest struct {
	Port       uint16 `json:"port,omitempty"` // virtual port; 0: a free one
	AllowPlain bool   `json:"allow_plain,omitempty"`
	// Wait bounds the wait for the peer (default 5 min).
	WaitSeconds float64 `json:"wait_seconds,omitempty"`
}

// ExposeRequest is the body of POST /expose.
type ExposeRequest struct {
	Local      string `json:"local"`          // TCP HOST:PORT the agent dials for each link
	Port       uint16 `json:"port,omitempty"` // virtual port; 0: a free one
	AllowPlain bool   `json:"allow_plain,omitempty"`
	// Name, if set, names the service in the agent's directory: others
	// dial NODE:NAME (see ServicesPort).
	Name string `json:"name,omitempty"`
}

// VirtualAddr is addr with a trailing GridDomain on its node removed (in
// any case, as DNS names: NODE.Grid, node.GRID).
func VirtualAddr(addr string) string {
	node, rest := addr, ""
	if i := strings.IndexAny(addr, ":@"); i >= 0 {
		node, rest = addr[:i], addr[i:]
	}
	if HasGridDomain(node) {
		node = node[:len(node)-len(GridDomain)]
	}
	return node + rest
}

// HasGridDomain says whether host ends in GridDomain, in any case.
func HasGridDomain(host string) bool {
	return len(host) > len(GridDomain) && strings.EqualFold(host[len(host)-len(GridDomain):], GridDomain)
}

// kindOf classifies a setup error by its type: a refusal of the link's
// options is the far side's policy, any other refusal the target's port.
func kindOf(err error) string {
	var re *direct.RefusedError
	switch {
	case errors.Is(err, hub.ErrNotFound):
		return KindUnknownName
	case errors.As(err, &re) && re.What == direct.RefusedLink:
		return KindNotAllowed
	case errors.Is(err, direct.ErrRefused):
		return KindRefused
	case errors.Is(err, context.DeadlineExceeded):
		return KindTimeout
	case errors.Is(err, identity.ErrBadAddr):
		return KindBadRequest
	case errors.Is(err, vconn.ErrNoMethod):
		return KindUnreachable
	}
	return KindFailed
}

func streamFail(w http.ResponseWriter, status int, kind string, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(StreamError{Kind: kind, Msg: err.Error()})
}

// upgrade answers 101, with extra header lines ("Name: value\r\n" each),
// and returns the raw control connection.
func upgrade(w http.ResponseWriter, extra string) (net.Conn, error) {
	c, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, err
	}
	if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+StreamProto+"\r\n"+extra+"\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	if rw.Reader.Buffered() > 0 {
		return &prefixConn{Conn: c, r: io.MultiReader(rw.Reader, c)}, nil
	}
	return c, nil
}

// prefixConn is a connection whose first bytes were already buffered.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (p *prefixConn) Read(b []byte) (int, error) { return p.r.Read(b) }

func (p *prefixConn) CloseWrite() error {
	if cw, ok := p.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (a *Agent) connect(w http.ResponseWriter, r *http.Request) {
	var req ConnectRequest
	if !decode(w, r, "connect", &req) {
		return
	}
	lo, err := req.Link.link()
	if err != nil {
		streamFail(w, http.StatusBadRequest, KindBadRequest, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	var va identity.Addr
	if req.Exit == "" {
		if va, err = identity.ParseAddr(VirtualAddr(req.Addr)); err != nil {
			streamFail(w, http.StatusBadRequest, KindBadRequest, err)
			return
		}
	}
	// the link is set up in turn (setups).
	if err := a.setups.acquire(ctx); err != nil {
		streamFail(w, http.StatusGatewayTimeout, KindTimeout, fmt.Errorf("waiting for a turn to set up a connection to %s: %w", req.Addr, err))
		return
	}
	var up net.Conn
	if req.Exit != "" {
		up, err = a.dialExit(ctx, req.Exit, req.Addr, lo)
	} else {
		var addr string
		if addr, err = a.resolveService(ctx, va); err == nil {
			up, err = a.dialStream(ctx, addr, lo)
		}
	}
	a.setups.release()
	if err != nil {
		var se *StreamError
		if errors.As(err, &se) {
			streamFail(w, http.StatusBadGateway, se.Kind, se)
			return
		}
		streamFail(w, http.StatusBadGateway, kindOf(err), err)
		return
	}
	p, _ := r.Context().Value(peerKey{}).(peerCreds)
	id, end := a.ends.add(p.uid)
	named := fmt.Sprintf("%s: %d\r\n", streamHeader, id)
	if req.Handoff && handoffSupported {
		c, err := upgrade(w, handoffHeader+": "+handoffFDs+"\r\n"+named)
		if err != nil {
			up.Close()
			a.ends.done(id)
			return
		}
		a.handoff(c, up, id, end, req.Addr)
		return
	}
	c, err := upgrade(w, named)
	if err != nil {
		up.Close()
		a.ends.done(id)
		return
	}
	// the client copies the bytes itself and sees the stream end; it
	// asks why afterwards (streamend.go)
	a.joinStream(c, up, id, end, req.Addr)
}

func (a *Agent) bind(w http.ResponseWriter, r *http.Request) {
	var req BindRequest
	if !decode(w, r, "bind", &req) {
		return
	}
	l, err := link.Listen(a.node, req.Port, link.ListenOptions{AllowPlain: req.AllowPlain})
	if err != nil {
		streamFail(w, http.StatusConflict, KindFailed, err)
		return
	}
	defer l.Close()
	c, err := upgrade(w, "")
	if err != nil {
		return
	}
	if _, err := c.Write(appendEvent(nil, Event{Bound: a.boundAddr(l)})); err != nil {
		c.Close()
		return
	}
	wait := 5 * time.Minute
	if req.WaitSeconds > 0 {
		wait = time.Duration(req.WaitSeconds * float64(time.Second))
	}
	// the client's read ending (it closed, or broke the protocol) or the
	// wait ending closes the listener, which ends Accept.
	watch := make(chan bool, 1)
	go func() {
		var one [1]byte
		n, _ := c.Read(one[:])
		l.Close()
		watch <- n > 0
	}()
	timer := time.AfterFunc(wait, func() { l.Close() })
	peer, err := l.Accept()
	timer.Stop()
	_ = c.SetReadDeadline(time.Now())
	early := <-watch
	_ = c.SetReadDeadline(time.Time{})
	if err == nil && early {
		peer.Close()
		err = errors.New("the client sent bytes before the peer came")
	}
	if err != nil {
		_, _ = c.Write(appendEvent(nil, Event{Error: fmt.Sprintf("bind: no peer: %v", err), Kind: KindTimeout}))
		c.Close()
		return
	}
	if _, err := c.Write(appendEvent(nil, Event{Peer: peer.RemoteAddr().String()})); err != nil {
		c.Close()
		peer.Close()
		return
	}
	Join(c, peer)
}

// boundAddr is the text form others dial a listener at: NAME:PORT.
func (a *Agent) boundAddr(l net.Listener) string {
	port := l.Addr().(vconn.Addr).Port
	name := a.node.Name()
	if name == "" {
		name = a.node.ID().String()
	}
	return identity.Addr{Node: name, Port: port}.String()
}

func (a *Agent) expose(w http.ResponseWriter, r *http.Request) {
	var req ExposeRequest
	if !decode(w, r, "expose", &req) {
		return
	}
	if _, _, err := net.SplitHostPort(req.Local); err != nil {
		streamFail(w, http.StatusBadRequest, KindBadRequest, fmt.Errorf("expose: local address %q: %w", req.Local, err))
		return
	}
	l, err := link.Listen(a.node, req.Port, link.ListenOptions{AllowPlain: req.AllowPlain})
	if err != nil {
		streamFail(w, http.StatusConflict, KindFailed, err)
		return
	}
	defer l.Close()
	if req.Name != "" {
		remove, err := a.services.add(req.Name, l.Addr().(vconn.Addr).Port)
		if err != nil {
			streamFail(w, http.StatusConflict, KindBadRequest, err)
			return
		}
		defer remove()
	}
	c, err := upgrade(w, "")
	if err != nil {
		return
	}
	defer c.Close()
	if _, err := c.Write(appendEvent(nil, Event{Bound: a.boundAddr(l)})); err != nil {
		return
	}
	go func() {
		_, _ = io.Copy(io.Discard, c) // until the client closes
		l.Close()
	}()
	for {
		peer, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			var d net.Dialer
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			local, err := d.DialContext(ctx, "tcp", req.Local)
			cancel()
			if err != nil {
				a.logf("agent: expose %s: %v", req.Local, err)
				peer.Close()
				return
			}
			Join(local, peer)
		}()
	}
}

// dialStream sets up the overlay end of a stream to addr: a link, except
// to EchoPort, every agent's built-in echo, which answers raw (as gridlink
// ping and the Go API's Dial use it): a link's hello would come back as
// data, so it is dialed raw and the link options do not apply.
func (a *Agent) dialStream(ctx context.Context, addr string, lo link.Options) (net.Conn, error) {
	if va, err := identity.ParseAddr(addr); err == nil && va.Port == EchoPort && va.Service == "" {
		c, err := a.node.Dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	c, err := link.Dial(ctx, a.node, addr, lo)
	if err != nil {
		return nil, err
	}
	return c, nil
}
