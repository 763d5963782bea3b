// Package gridlink is the Go API of gridlink: connections between the
// processes of a job spread over many sites, whatever firewalls, NATs and
// non-routed networks stand between them, set up the most direct way the
// network allows (see docs/connectivity.md). It is the product: what the
// gridlink command does, it does by calling this package (or the node
// agent's client), which owns a node's configuration and start-up
// (config.go, node.go: Start, StartAttached, StartAgent), hubs and their
// status socket (hub.go), perf (perf.go), the glue of SOCKS, forward, nc
// and expose to the agent (apps.go), the grid CA, certificates and
// proxies (gridca.go), copies and transfer services (copy.go,
// copyprogress.go, serve.go) and third-party delegation (delegate.go). It
// leaves flags, output formats and passphrase
// prompts to the command line (package cli), and the lower layers' test
// knobs (method lists, head starts) to package vconn.
//
// A process starts a Node (or uses the default one, configured from the
// environment), then dials virtual addresses NODE:PORT and listens on
// ports. Dial and Listen speak net.Conn and net.Listener, so gridlink fits
// wherever a dial function fits: net/http's Transport.DialContext, gRPC's
// WithContextDialer, and so on.
//
// Every connection is a link (package link): by default one stream,
// encrypted with TLS 1.3, without compression, and then it costs nothing
// over the virtual connection beneath. DialWith asks for more: parallel
// streams (a number, or automatic), compression (S2, zstd, or adaptive per
// block), or authenticated plain (the handshake proves both ends, the data
// travels in the clear), whatever method set the connection up. ListenWith
// says what a listener allows.
package gridlink

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

// DefaultResumeTimeout is how long a resumable link waits for a
// connection back unless told otherwise (link.Config.ResumeTimeout).
const DefaultResumeTimeout = link.DefaultResumeTimeout

// LinkOptions are a connection's options (see link.Options); the zero
// value is one encrypted stream without compression.
type LinkOptions = link.Options

// ListenOptions are a listener's policy (see link.ListenOptions); the zero
// value accepts encrypted connections of up to 64 streams.
type ListenOptions = link.ListenOptions

// AutoStreams as LinkOptions.Streams grows the number of parallel streams
// while throughput grows.
const AutoStreams = link.Auto

// Node is this process's presence in the overlay.
type Node struct {
	n     *vconn.Node
	creds *pki.Credentials // what it proves and judges peers by
}

// NotAttachedError says that a node has no hub now, since when and why;
// Dial returns it at once for a target only the hubs can find or reach.
type NotAttachedError = vconn.NotAttachedError

// ErrIdentityAttached is wrapped by Start's error (and Attached's) when a
// hub refused the node because another process with its identity (the
// same key, proxy or certificate: a user's agent, say) is attached there
// and answers: the error names where it runs, since when, and says to use
// it or stop it. A hub keeps one attachment per identity.
var ErrIdentityAttached = hub.ErrIdentityAttached

// WaitAttached waits until the node is attached to a hub (at once without
// hubs), refused, or ctx is done (30 s if it has no deadline).
func (n *Node) WaitAttached(ctx context.Context) error { return n.n.WaitAttached(ctx) }

// Dial connects to a virtual address NODE:PORT[@HUB], where NODE is a node
// name or ID.
func (n *Node) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return n.DialWith(ctx, addr, LinkOptions{})
}

// DialWith is Dial with link options: parallel streams, compression,
// authenticated plain.
func (n *Node) DialWith(ctx context.Context, addr string, o LinkOptions) (net.Conn, error) {
	c, err := link.Dial(ctx, n.n, addr, o)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// DialContext is Dial with the signature of net.Dialer.DialContext, for
// net/http and the like. network must be "tcp" (or tcp4/tcp6, "" too).
func (n *Node) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	switch network {
	case "", "tcp", "tcp4", "tcp6":
		return n.Dial(ctx, addr)
	}
	return nil, fmt.Errorf("gridlink: network %q: only stream connections are supported", network)
}

// Listen listens on a port of this node: "7000", ":7000", or a well-known
// service name ("echo"). "0" picks a free port.
func (n *Node) Listen(port string) (net.Listener, error) {
	return n.ListenWith(port, ListenOptions{})
}

// ListenWith is Listen with a policy: whether to allow authenticated
// plain, how many streams a connection may have.
func (n *Node) ListenWith(port string, o ListenOptions) (net.Listener, error) {
	p, err := parsePort(port)
	if err != nil {
		return nil, err
	}
	l, err := link.Listen(n.n, p, o)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Name is the node's name; ID its ID.
func (n *Node) Name() string { return n.n.Name() }

// ID is the node's ID.
func (n *Node) ID() identity.ID { return n.n.ID() }

// Close shuts the node down.
func (n *Node) Close() error { return n.n.Close() }

func parsePort(s string) (uint16, error) {
	s = strings.TrimPrefix(s, ":")
	if p, ok := map[string]uint16{"echo": 7}[s]; ok {
		return p, nil
	}
	v, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("gridlink: bad port %q: want a number 0-65535 or a service name", s)
	}
	return uint16(v), nil
}

// The default node, for the package-level Dial and Listen.
var (
	defaultOnce sync.Once
	defaultNode *Node
	defaultErr  error
)

// Default returns the process's default node, started on first use from
// the environment: GRIDLINK_HUB (hub addresses, comma-separated; without
// it the node makes direct connections only), GRIDLINK_NAME (default: the
// host name) and GRIDLINK_KEY (a key file, created if missing; default: a
// fresh key).
func Default() (*Node, error) {
	defaultOnce.Do(func() {
		cfg := Config{Name: os.Getenv("GRIDLINK_NAME"), KeyFile: os.Getenv("GRIDLINK_KEY")}
		if h := os.Getenv("GRIDLINK_HUB"); h != "" {
			cfg.Hubs = strings.Split(h, ",")
		}
		defaultNode, defaultErr = Start(context.Background(), cfg)
	})
	if defaultErr != nil {
		return nil, fmt.Errorf("gridlink: default node: %w", defaultErr)
	}
	return defaultNode, nil
}

// Dial connects through the default node.
func Dial(ctx context.Context, addr string) (net.Conn, error) {
	n, err := Default()
	if err != nil {
		return nil, err
	}
	return n.Dial(ctx, addr)
}

// Listen listens on the default node.
func Listen(port string) (net.Listener, error) {
	n, err := Default()
	if err != nil {
		return nil, err
	}
	return n.Listen(port)
}

// ErrRefused is wrapped by every refusal: nothing listens on the port, the
// target's access rules or its link options say no. The error is a
// *RefusedError naming the refusing end and its reason (errors.As).
var ErrRefused = direct.ErrRefused

// RefusedError is a refusal's facts: what was refused, by which end, why.
type RefusedError = direct.RefusedError
