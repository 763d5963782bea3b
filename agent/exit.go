package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/link"
)

// ExitPort is the virtual port of the exit service, which agents started
// with Config.AllowExit serve: it dials ordinary TCP hosts for SOCKS
// clients elsewhere (gridlink socks --exit NODE).
//
// Exit protocol, on a link to ExitPort: the dialler sends an event line
// {"dial":"HOST:PORT"}; the exit answers {"peer":"IP:PORT"} and then
// carries the TCP connection's bytes, or {"error":...,"kind":...} and
// closes. An agent without AllowExit does not listen there, so the dial
// is refused.
const ExitPort = 10

// serveExit answers exit requests on l.
func (a *Agent) serveExit(l *link.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go a.exit(c)
	}
}

func (a *Agent) exit(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	ev, err := control.ReadEvent(c)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil || ev.Dial == "" {
		c.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var d net.Dialer
	tc, err := d.DialContext(ctx, "tcp", ev.Dial)
	if err != nil {
		a.logf("agent: exit to %s for %s: %v", ev.Dial, c.RemoteAddr(), err)
		_, _ = c.Write(control.AppendEvent(nil, control.Event{Error: fmt.Sprintf("exit %s: %v", a.node.Name(), err), Kind: tcpKind(err)}))
		c.Close()
		return
	}
	if _, err := c.Write(control.AppendEvent(nil, control.Event{Peer: tc.RemoteAddr().String()})); err != nil {
		c.Close()
		tc.Close()
		return
	}
	control.Join(c, tc)
}

// tcpKind classifies a TCP dial's error.
func tcpKind(err error) string {
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return control.KindRefused
	case errors.As(err, &dns):
		return control.KindUnknownName
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return control.KindUnreachable
	case errors.Is(err, context.DeadlineExceeded):
		return control.KindTimeout
	}
	return control.KindFailed
}

// dialExit asks node exit's exit service to dial the TCP address target.
func (a *Agent) dialExit(ctx context.Context, exit, target string, o link.Options) (net.Conn, error) {
	ea, err := identity.ParseAddr(control.VirtualAddr(exit))
	if err != nil {
		return nil, &control.StreamError{Kind: control.KindBadRequest, Msg: fmt.Sprintf("exit node %q: %v", exit, err)}
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, &control.StreamError{Kind: control.KindBadRequest, Msg: fmt.Sprintf("exit target %q: %v", target, err)}
	}
	ea.Port, ea.Service = ExitPort, ""
	c, err := link.Dial(ctx, a.node, ea.String(), o)
	if err != nil {
		var re *direct.RefusedError
		if errors.As(err, &re) && re.What != direct.RefusedLink { // nothing listens on ExitPort
			return nil, &control.StreamError{Kind: control.KindNotAllowed, Msg: fmt.Sprintf("node %s does not allow exits (its agent needs --allow-exit): %v", ea.Node, err)}
		}
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	_, err = c.Write(control.AppendEvent(nil, control.Event{Dial: target}))
	var ev control.Event
	if err == nil {
		ev, err = control.ReadEvent(c)
	}
	stop()
	_ = c.SetDeadline(time.Time{})
	if err == nil && ev.Peer == "" {
		err = &control.StreamError{Kind: orElse(ev.Kind, control.KindFailed), Msg: orElse(ev.Error, "exit: no answer")}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
