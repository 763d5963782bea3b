package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

// The agent's side of the stream requests (control.StreamProto): connect,
// bind and expose, each turning its control connection into a byte stream.

// linkOptions are the link options a stream request asks for.
func linkOptions(o control.LinkOptions) (link.Options, error) {
	lo := link.Options{Streams: o.Streams, MaxStreams: o.MaxStreams, Plain: o.Plain}
	if o.ResumeSeconds >= 0 {
		lo.Resume = true
		lo.Config.ResumeTimeout = time.Duration(o.ResumeSeconds * float64(time.Second))
		lo.Upgrade = o.Upgrade
	}
	if o.Compression != "" {
		c, err := link.ParseCompression(o.Compression)
		if err != nil {
			return lo, err
		}
		lo.Compression = c
	}
	return lo, nil
}

// kindOf classifies a setup error by its type: a refusal of the link's
// options is the far side's policy, any other refusal the target's port.
func kindOf(err error) string {
	var re *direct.RefusedError
	switch {
	case errors.Is(err, pki.ErrDenied):
		// the far side refused the caller in its handshake (a link that
		// waits for the acceptor's reply, as a resumable one does, meets
		// it while it is set up; streamend.go's, once it runs)
		return control.KindNotAllowed
	case errors.Is(err, hub.ErrNotFound):
		return control.KindUnknownName
	case errors.As(err, &re) && re.What == direct.RefusedLink:
		return control.KindNotAllowed
	case errors.Is(err, direct.ErrRefused):
		return control.KindRefused
	case errors.Is(err, context.DeadlineExceeded):
		return control.KindTimeout
	case errors.Is(err, identity.ErrBadAddr):
		return control.KindBadRequest
	case errors.Is(err, vconn.ErrNoMethod):
		return control.KindUnreachable
	}
	return control.KindFailed
}

func streamFail(w http.ResponseWriter, status int, kind string, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(control.StreamError{Kind: kind, Msg: err.Error()})
}

// upgrade answers 101, with extra header lines ("Name: value\r\n" each),
// and returns the raw control connection.
func upgrade(w http.ResponseWriter, extra string) (net.Conn, error) {
	c, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, err
	}
	if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+control.StreamProto+"\r\n"+extra+"\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return control.WithBuffered(c, rw.Reader), nil
}

func (a *Agent) connect(w http.ResponseWriter, r *http.Request) {
	var req control.ConnectRequest
	if !decode(w, r, "connect", &req) {
		return
	}
	lo, err := linkOptions(req.Link)
	if err != nil {
		streamFail(w, http.StatusBadRequest, control.KindBadRequest, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	var va identity.Addr
	if req.Exit == "" {
		if va, err = identity.ParseAddr(control.VirtualAddr(req.Addr)); err != nil {
			streamFail(w, http.StatusBadRequest, control.KindBadRequest, err)
			return
		}
	}
	// the link is set up in turn (setups).
	if err := a.setups.acquire(ctx); err != nil {
		streamFail(w, http.StatusGatewayTimeout, control.KindTimeout, fmt.Errorf("waiting for a turn to set up a connection to %s: %w", req.Addr, err))
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
		var se *control.StreamError
		if errors.As(err, &se) {
			streamFail(w, http.StatusBadGateway, se.Kind, se)
			return
		}
		streamFail(w, http.StatusBadGateway, kindOf(err), err)
		return
	}
	p, _ := r.Context().Value(peerKey{}).(peerCreds)
	id, end := a.ends.add(p.uid)
	defer a.links.add(id, req.Addr, up)()
	named := fmt.Sprintf("%s: %d\r\n", control.StreamHeader, id)
	if req.Handoff && handoffSupported {
		c, err := upgrade(w, control.HandoffHeader+": "+control.HandoffFDs+"\r\n"+named)
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
	var req control.ExposeRequest
	if !decode(w, r, "expose", &req) {
		return
	}
	if _, _, err := net.SplitHostPort(req.Local); err != nil {
		streamFail(w, http.StatusBadRequest, control.KindBadRequest, fmt.Errorf("expose: local address %q: %w", req.Local, err))
		return
	}
	l, err := link.Listen(a.node, req.Port, link.ListenOptions{AllowPlain: req.AllowPlain})
	if err != nil {
		streamFail(w, http.StatusConflict, control.KindFailed, err)
		return
	}
	defer l.Close()
	if req.Name != "" {
		remove, err := a.services.add(req.Name, l.Addr().(vconn.Addr).Port)
		if err != nil {
			streamFail(w, http.StatusConflict, control.KindBadRequest, err)
			return
		}
		defer remove()
	}
	c, err := upgrade(w, "")
	if err != nil {
		return
	}
	defer c.Close()
	if _, err := c.Write(control.AppendEvent(nil, control.Event{Bound: a.boundAddr(l)})); err != nil {
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
			control.Join(local, peer)
		}()
	}
}

// dialStream sets up the overlay end of a stream to addr: a link, except
// to EchoPort, every agent's built-in echo, which answers raw (as gridlink
// ping and the Go API's Dial use it): a link's hello would come back as
// data, so it is dialed raw and the link options do not apply; likewise
// SinkPort, which never answers a hello (a resumable link waits for one).
func (a *Agent) dialStream(ctx context.Context, addr string, lo link.Options) (net.Conn, error) {
	if va, err := identity.ParseAddr(addr); err == nil && (va.Port == EchoPort || va.Port == SinkPort) && va.Service == "" {
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
