package cli

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

// Delegation in third-party transfers (gridlink cp A:x B:y). In a grid
// with a CA, the source service A asks the caller for a proxy by signing
// request over the caller's authenticated connection; the caller signs one
// restricted to the target's transfer service at the target node alone
// (port-2811@ID, ID the identity key of B as the caller's own node
// resolves it through its hubs, never as A says); A then dials B from a
// transient node whose identity is that proxy, so B admits or refuses the
// caller, never A, and every other node refuses the proxy. In an open
// grid (no --ca) nothing is asked and A dials as itself.

// delegator is the credential a caller of a third-party transfer
// delegates from: its proxy (--proxy); nil for an open grid. Only users
// sign proxies: a hub's or node's certificate cannot delegate.
func (sf *secFlags) delegator() (*proxy.Credential, error) {
	switch {
	case sf.caFile == "":
		return nil, nil
	case sf.proxyFile == "":
		return nil, errors.New("a third-party transfer in a grid with a CA runs as a user, whom the source acts for: give --proxy (from gridlink proxy init); a node's certificate cannot delegate")
	}
	return proxy.Load(sf.proxyFile)
}

// pushDelegate is the caller's answer to a push source's signing request:
// a proxy of cred restricted to target's service at the node whose
// identity key is node. Nil cred answers with nothing (an open grid).
func pushDelegate(cred *proxy.Credential, target string, node identity.ID) (func(context.Context, string, []byte) ([]byte, error), error) {
	if cred == nil {
		return nil, nil
	}
	if node.IsZero() {
		return nil, errors.New("a delegated proxy names the node it may reach: no target node given")
	}
	svc, err := vconn.ServiceOf(target)
	if err != nil {
		return nil, err
	}
	return xfer.DelegateProxy(cred, []string{proxy.Entry(svc, node)}, 0), nil
}

// pushDelegateTo is pushDelegate for target as this caller's node resolves
// it (through its own hubs, waiting up to 15 s for them to learn the
// name), so the proxy reaches that node and no other.
func pushDelegateTo(ctx context.Context, node *vconn.Node, cred *proxy.Credential, target string) (func(context.Context, string, []byte) ([]byte, error), error) {
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
		m, err := node.Resolve(ctx, a)
		if err == nil {
			return pushDelegate(cred, target, m.ID)
		}
		if !errors.Is(err, hub.ErrNotFound) || time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("the push target %s, whom the delegated proxy is to reach: %w", target, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pushDialer is a transfer service's Config.Push: it dials the target's
// service as the caller (cred, a delegated proxy) or, in an open grid, as
// the service's node.
func pushDialer(cfg vconn.Config, node *vconn.Node, maxStreams int) func(context.Context, string, xfer.Link, *proxy.Credential) (net.Conn, error) {
	return func(ctx context.Context, target string, l xfer.Link, cred *proxy.Credential) (net.Conn, error) {
		o := link.Options{Streams: l.Streams, MaxStreams: maxStreams}
		if o.Streams == 0 {
			o.Streams = link.Auto
		}
		comp, err := link.ParseCompression(orDefault(l.Compress, "off"))
		if err != nil {
			return nil, err
		}
		o.Compression = comp
		target = withDefaultPort(target, xfer.Port)
		if cred != nil {
			return dialAs(ctx, cfg, cred, target, o)
		}
		return dialLink(ctx, node, target, o)
	}
}

// dialAs dials target for a push from a transient node acting as a
// delegated proxy: cfg's hubs and network settings, cred's identity. The
// node closes with the connection.
func dialAs(ctx context.Context, cfg vconn.Config, cred *proxy.Credential, target string, o link.Options) (net.Conn, error) {
	creds, err := pki.FromProxy(cred, cfg.Creds.Trust())
	if err != nil {
		return nil, fmt.Errorf("the delegated proxy: %w", err)
	}
	c := cfg
	c.Creds, c.Key = creds, creds.Key
	c.Name = fmt.Sprintf("%.40s.push-%s", cfg.Name, creds.Key.ID().Short())
	c.PortMap = false
	n, err := startOnce(ctx, c)
	if err != nil {
		return nil, err
	}
	conn, err := dialLink(ctx, n, target, o)
	if err != nil {
		n.Close()
		return nil, err
	}
	return &nodeConn{Conn: conn, node: n}, nil
}

// nodeConn is a connection that closes its node when it closes.
type nodeConn struct {
	net.Conn
	node *vconn.Node
}

func (c *nodeConn) Close() error {
	err := c.Conn.Close()
	c.node.Close()
	return err
}
