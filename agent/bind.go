package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

// bind listens on a virtual port (a free one, unpredictable: vconn) for
// one peer: the node req.Peer names, looked up through the hubs when the
// bind starts and recognised by its identity key, which the connection's
// handshake proved. Any other dialler is refused (a direct.RefusedError
// whose reason, which the dialler reads, names the node admitted and the
// dialler; logged) and the bind waits on for the right one until it
// times out.
func (a *Agent) bind(w http.ResponseWriter, r *http.Request) {
	var req control.BindRequest
	if !decode(w, r, "bind", &req) {
		return
	}
	if req.Peer == "" {
		streamFail(w, http.StatusBadRequest, control.KindBadRequest, errors.New("bind: name the peer to admit (BindRequest.Peer: NODE, the SOCKS client's DST.ADDR)"))
		return
	}
	pa, err := identity.ParseAddr(control.VirtualAddr(req.Peer))
	if err != nil {
		streamFail(w, http.StatusBadRequest, control.KindBadRequest, fmt.Errorf("bind: the peer: %w", err))
		return
	}
	pa.Port, pa.Service = 0, ""
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	want, err := a.node.Resolve(ctx, pa)
	cancel()
	if err != nil {
		streamFail(w, http.StatusBadGateway, kindOf(err), fmt.Errorf("bind: the peer %s: %w", req.Peer, err))
		return
	}
	allow := func(p pki.Peer) error {
		if p.ID == want.ID {
			return nil
		}
		err := &direct.RefusedError{What: direct.RefusedConnection,
			Reason: fmt.Sprintf("this bind admits only %s (%s), not %s", pa.Node, want.ID.Short(), p)}
		a.logf("agent: bind: refused: %v", err)
		return err
	}
	l, err := link.Listen(a.node, req.Port, link.ListenOptions{AllowPlain: req.AllowPlain, Allow: allow})
	if err != nil {
		streamFail(w, http.StatusConflict, control.KindFailed, err)
		return
	}
	defer l.Close()
	bound := a.boundAddr(l)
	c, err := upgrade(w, "")
	if err != nil {
		return
	}
	if _, err := c.Write(control.AppendEvent(nil, control.Event{Bound: bound})); err != nil {
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
		_, _ = c.Write(control.AppendEvent(nil, control.Event{Error: fmt.Sprintf("bind: no peer: %v", err), Kind: control.KindTimeout}))
		c.Close()
		return
	}
	// the peer by the name it was admitted as (its own hello's could be anything)
	var port uint16
	if va, ok := peer.RemoteAddr().(vconn.Addr); ok {
		port = va.Port
	}
	from := net.JoinHostPort(pa.Node, strconv.Itoa(int(port)))
	if _, err := c.Write(control.AppendEvent(nil, control.Event{Peer: from})); err != nil {
		c.Close()
		peer.Close()
		return
	}
	control.Join(c, peer)
}
