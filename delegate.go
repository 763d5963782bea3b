package gridlink

// Delegation in third-party transfers (gridlink cp A:x B:y). In a grid
// with a CA, the source service A asks the caller for a proxy by signing
// request over the caller's authenticated connection; the caller signs one
// restricted to the target's transfer service at the target node alone
// (port-2811@ID, ID the identity key of B as the caller's own node
// resolves it through its hubs, never as A says); A then dials B from a
// transient node whose identity is that proxy, so B admits or refuses the
// caller, never A, and every other node refuses the proxy. In an open
// grid (no CA) nothing is asked and A dials as itself.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/proxy"
	"github.com/gridlink/gridlink/vconn"
	"github.com/gridlink/gridlink/xfer"
)

// ErrNoDelegator is a push in a grid with a CA without a proxy to
// delegate from (CopyConfig.ProxyFile).
var ErrNoDelegator = errors.New("a third-party transfer in a grid with a CA runs as a user, whom the source acts for: it needs the user's proxy; a node's certificate cannot delegate")

// ErrNoTargetNode is a delegation asked for without the node its proxy
// may reach.
var ErrNoTargetNode = errors.New("a delegated proxy names the node it may reach: no target node given")

// PushTargetError is a push whose target the caller's node could not
// resolve, so it delegated nothing.
type PushTargetError struct {
	Target string
	Err    error
}

func (e *PushTargetError) Error() string {
	return fmt.Sprintf("the push target %s, whom the delegated proxy is to reach: %v", e.Target, e.Err)
}

func (e *PushTargetError) Unwrap() error { return e.Err }

// delegateFor is the caller's answer to a push source's signing request:
// a proxy of cred restricted to target's service at the node whose
// identity key is node. Nil cred answers with nothing (an open grid).
func delegateFor(cred *proxy.Credential, target string, node identity.ID) (func(context.Context, string, []byte) ([]byte, error), error) {
	if cred == nil {
		return nil, nil
	}
	if node.IsZero() {
		return nil, ErrNoTargetNode
	}
	svc, err := vconn.ServiceOf(target)
	if err != nil {
		return nil, err
	}
	return xfer.DelegateProxy(cred, []string{proxy.Entry(svc, node)}, 0), nil
}

// delegateTo is delegateFor for target as this caller's node resolves it
// (through its own hubs, waiting up to 15 s for them to learn the name),
// so the proxy reaches that node and no other.
func delegateTo(ctx context.Context, node *Node, cred *proxy.Credential, target string) (func(context.Context, string, []byte) ([]byte, error), error) {
	if cred == nil {
		return nil, nil
	}
	a, err := identity.ParseAddr(target)
	if err != nil {
		return nil, err
	}
	a.Port, a.Service = 0, ""
	deadline := time.Now().Add(15 * time.Second)
	for {
		m, err := node.n.Resolve(ctx, a)
		if err == nil {
			return delegateFor(cred, target, m.ID)
		}
		if !errors.Is(err, hub.ErrNotFound) || time.Now().After(deadline) || ctx.Err() != nil {
			return nil, &PushTargetError{Target: target, Err: err}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// PushFunc dials a push's target for a transfer service
// (xfer.Config.Push).
type PushFunc = func(ctx context.Context, target string, l xfer.Link, cred *proxy.Credential) (net.Conn, error)

// PushDialer is a transfer service's xfer.Config.Push: it dials the
// target's service as the caller (cred, a delegated proxy) from a
// transient node, or, in an open grid (cred nil), as the service's node.
// cfg is the service node's configuration (its hubs and network settings
// serve the transient node), maxStreams the most streams of a link.
func PushDialer(cfg Config, node *Node, maxStreams int) PushFunc {
	trust := gridTrust(node)
	return func(ctx context.Context, target string, l xfer.Link, cred *proxy.Credential) (net.Conn, error) {
		o := link.Options{Streams: l.Streams, MaxStreams: maxStreams, Resume: true}
		if o.Streams == 0 {
			o.Streams = link.Auto
		}
		comp := "off"
		if l.Compress != "" {
			comp = l.Compress
		}
		c, err := link.ParseCompression(comp)
		if err != nil {
			return nil, err
		}
		o.Compression = c
		target = serviceAddr(target, xfer.Port)
		if cred == nil {
			return dialService(ctx, node, target, o)
		}
		creds, err := pki.FromProxy(cred, trust)
		if err != nil {
			return nil, fmt.Errorf("the delegated proxy: %w", err)
		}
		return dialAs(ctx, pushNodeConfig(cfg, node.Name(), creds), target, o)
	}
}

// dialAs dials target for a push from a transient node of cfg, a
// delegated proxy's (pushNodeConfig). The node closes with the
// connection.
func dialAs(ctx context.Context, cfg Config, target string, o link.Options) (net.Conn, error) {
	n, err := startCopyNode(ctx, cfg)
	if err != nil {
		return nil, err
	}
	conn, err := dialService(ctx, n, target, o)
	if err != nil {
		n.Close()
		return nil, err
	}
	return &nodeConn{Conn: conn, node: n}, nil
}

// pushNodeConfig is the configuration of a push's transient node: cfg's
// hubs and network settings, creds' identity (a delegated proxy), named
// after the service's node (name) and its key, no port mapping.
func pushNodeConfig(cfg Config, name string, creds *pki.Credentials) Config {
	c := cfg
	c.creds = creds
	c.Name = fmt.Sprintf("%.40s-push-%s", name, creds.Key.ID().Short()) // a name has no dot (identity.CheckName)
	c.PortMap = false
	return c
}

// nodeConn is a connection that closes its node when it closes.
type nodeConn struct {
	net.Conn
	node *Node
}

func (c *nodeConn) Close() error {
	err := c.Conn.Close()
	c.node.Close()
	return err
}
