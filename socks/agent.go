package socks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/gridlink/gridlink/agent/control"
)

// AgentBackend is the Backend of gridlink socks: it dials and binds
// through the node agent, which sets connections up the best way the
// network allows. CONNECT to NAME.grid:PORT (names in any case, as in
// DNS: Name.GRID is name.grid) reaches node NAME's virtual
// port; CONNECT to any other host goes through the node Exit (its agent
// must allow exits) or is not allowed. BIND listens on a free virtual port
// of this node (chosen at random) and tells the client NAME.grid:PORT;
// it admits only the node its DST.ADDR names (PEER.grid: the agent
// refuses any other, naming it, and waits on), and is not allowed for a
// DST.ADDR that names no node.
type AgentBackend struct {
	Client *control.Client
	Exit   string              // node that dials ordinary hosts; "": none
	Link   control.LinkOptions // options of every link
	// BindPlain lets BIND peers use authenticated plain links.
	BindPlain bool
}

// replyFor maps the agent's error kinds to SOCKS reply codes.
var replyFor = map[string]byte{
	control.KindBadRequest:  ReplyHostUnreachable,
	control.KindUnknownName: ReplyHostUnreachable,
	control.KindRefused:     ReplyRefused,
	control.KindUnreachable: ReplyNetworkUnreachable,
	control.KindNotAllowed:  ReplyNotAllowed,
	control.KindTimeout:     ReplyTTLExpired,
	control.KindFailed:      ReplyGeneralFailure,
}

func wrap(err error) error {
	var se *control.StreamError
	if errors.As(err, &se) {
		if code, ok := replyFor[se.Kind]; ok {
			return &Error{Code: code, Err: err}
		}
	}
	return err
}

// Connect dials a through the agent.
func (b *AgentBackend) Connect(ctx context.Context, a Addr) (net.Conn, error) {
	req := control.ConnectRequest{Addr: a.String(), Link: b.Link}
	if !a.IsName() || !control.HasGridDomain(a.Host) {
		if b.Exit == "" {
			return nil, &Error{Code: ReplyNotAllowed, Err: fmt.Errorf("%s is not an overlay name (NAME%s) and no exit node is set (gridlink socks --exit NODE)", a, control.GridDomain)}
		}
		req.Exit = b.Exit
	}
	s, err := b.Client.Open(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return s, nil // a Joiner: the agent copies the client's bytes itself
}

// Bind listens on the overlay for one peer, the node a names.
func (b *AgentBackend) Bind(ctx context.Context, a Addr) (Binding, error) {
	if !a.IsName() || !control.HasGridDomain(a.Host) {
		return nil, &Error{Code: ReplyNotAllowed, Err: fmt.Errorf("BIND admits only the node DST.ADDR names, and %s names none: give the expected peer as NAME%s", a, control.GridDomain)}
	}
	l, err := b.Client.Bind(ctx, control.BindRequest{Peer: control.VirtualAddr(a.Host), AllowPlain: b.BindPlain})
	if err != nil {
		return nil, wrap(err)
	}
	return &agentBinding{l: l, addr: gridAddr(l.Addr)}, nil
}

// gridAddr turns the agent's NODE:PORT into NODE.grid:PORT.
func gridAddr(s string) Addr {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return Addr{Host: s}
	}
	p, _ := strconv.ParseUint(port, 10, 16)
	return Addr{Host: host + control.GridDomain, Port: uint16(p)}
}

type agentBinding struct {
	l    *control.Listening
	addr Addr
}

func (b *agentBinding) Addr() Addr { return b.addr }

func (b *agentBinding) Accept(ctx context.Context) (net.Conn, Addr, error) {
	c, peer, err := b.l.Accept(ctx)
	if err != nil {
		return nil, Addr{}, wrap(err)
	}
	return c, gridAddr(peer), nil
}

func (b *agentBinding) Close() error { return b.l.Close() }
