package gridlink

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/forward"
	"github.com/gridlink/gridlink/socks"
)

// Unmodified programs on the overlay, through this host's node agent (its
// client, control.Dial): a SOCKS5 server, local ports forwarded to overlay
// services, stdin and stdout joined to one (ssh's ProxyCommand), local
// services exposed on the overlay.

// SOCKSConfig configures a SOCKS5 server. The zero value is not enough:
// Agent is required.
type SOCKSConfig struct {
	// Listen is the server's TCP address; empty: 127.0.0.1:1080.
	Listen string
	// Agent is the client of the node agent whose node makes the
	// connections.
	Agent *control.Client
	// Exit is the node that dials hosts outside the overlay (its agent
	// allows exit); empty: such requests are refused.
	Exit string
	// Link are the options of every link.
	Link control.LinkOptions
	// Users are the usernames and passwords of clients on other hosts;
	// none: only this host's clients are served. Of those, only the
	// ones of this process's uid and root, whatever they give
	// (socks.Server: the kernel says whose a connection is).
	Users map[string]string
	// Logger logs failed requests; nil: no log.
	Logger *slog.Logger
}

// SOCKSServer is a listening SOCKS5 server.
type SOCKSServer struct {
	s  *socks.Server
	ln net.Listener
}

// ListenSOCKS listens for SOCKS5 clients; Serve serves them.
func ListenSOCKS(cfg SOCKSConfig) (*SOCKSServer, error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:1080"
	}
	s := &socks.Server{Backend: &socks.AgentBackend{Client: cfg.Agent, Exit: cfg.Exit, Link: cfg.Link}, Users: cfg.Users}
	if cfg.Logger != nil {
		s.Logf = logfOf(cfg.Logger)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	return &SOCKSServer{s: s, ln: ln}, nil
}

// Addr is where the server listens.
func (s *SOCKSServer) Addr() net.Addr { return s.ln.Addr() }

// LoopbackOnly says that the server listens beyond loopback without
// users, so that it will serve only this host's clients (of this uid and
// root).
func (s *SOCKSServer) LoopbackOnly() bool {
	ap, err := net.ResolveTCPAddr("tcp", s.ln.Addr().String())
	return err == nil && !ap.IP.IsLoopback() && len(s.s.Users) == 0
}

// Serve serves clients until ctx is done (then it returns nil) or the
// listener fails.
func (s *SOCKSServer) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.ln.Close() })
	defer stop()
	if err := s.s.Serve(s.ln); ctx.Err() == nil {
		return err
	}
	return nil
}

// Close stops listening.
func (s *SOCKSServer) Close() error { return s.ln.Close() }

// LoadSOCKSUsers reads a file of USER:PASSWORD lines ('#' starts a
// comment line; each at most 255 bytes), for SOCKSConfig.Users.
func LoadSOCKSUsers(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	users := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		u, p, ok := strings.Cut(line, ":")
		if !ok || u == "" || len(u) > 255 || len(p) > 255 {
			return nil, fmt.Errorf("%s:%d: want USER:PASSWORD (each at most 255 bytes)", path, n)
		}
		users[u] = p
	}
	return users, sc.Err()
}

// Expose has the agent listen on req.Port and join every link that
// arrives there to a new TCP connection to req.Local, until ctx is done;
// bound is told the virtual address once it listens.
func Expose(ctx context.Context, c *control.Client, req control.ExposeRequest, bound func(addr string)) error {
	return forward.Expose(ctx, c, req, bound)
}

// ForwardConfig configures Forward. The zero value serves this host's
// clients of this uid and root, and logs nothing.
type ForwardConfig struct {
	// Logger logs the connections that fail or are refused; nil: no log.
	Logger *slog.Logger
	// AllowRemote serves clients of other hosts too (l listens beyond
	// loopback), whom nothing identifies: they act with the agent's
	// credentials. Off: refused.
	AllowRemote bool
}

// Forward joins every connection to l it admits (only this uid's and
// root's on this host, see package forward) to a new overlay connection
// (req), until ctx is done.
func Forward(ctx context.Context, l net.Listener, c *control.Client, req control.ConnectRequest, cfg ForwardConfig) error {
	o := forward.Options{AllowRemote: cfg.AllowRemote}
	if cfg.Logger != nil {
		o.Logf = logfOf(cfg.Logger)
	}
	return forward.Forward(ctx, l, c, req, o)
}

// NC joins in and out to an overlay connection (req): what in says is
// sent, its end half-closes the connection, and what the far side sends
// goes to out until it closes.
func NC(ctx context.Context, c *control.Client, req control.ConnectRequest, in io.Reader, out io.Writer) error {
	return forward.NC(ctx, c, req, in, out)
}
