package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/agent/control"
)

// linkFlags are the link options of socks, forward and nc.
type linkFlags struct {
	streams, compress, encrypt string
	control                    string
	resume                     time.Duration
	upgrade                    bool
}

func (lf *linkFlags) add(c *cobra.Command) {
	f := c.Flags()
	f.StringVarP(&lf.streams, "streams", "P", "1", "parallel streams of each link: a number, or auto")
	f.StringVar(&lf.compress, "compress", "off", "compression: off, s2, zstd or auto")
	f.StringVar(&lf.encrypt, "encrypt", "on", "on: TLS 1.3; off: authenticated plain (the far side must allow it)")
	f.StringVar(&lf.control, "control", "", "agent control socket (default: your agent's, then the system agent's @gridlink-agent)")
	addResumeFlag(c, &lf.resume)
	addUpgradeFlag(c, &lf.upgrade)
}

func (lf *linkFlags) options() (control.LinkOptions, error) {
	var o control.LinkOptions
	switch lf.streams {
	case "auto":
		o.Streams = gridlink.AutoStreams
	default:
		n, err := strconv.Atoi(lf.streams)
		if err != nil || n < 1 {
			return o, fmt.Errorf("--streams %q: want a number from 1 or auto", lf.streams)
		}
		o.Streams = n
	}
	if _, err := gridlink.ParseCompression(lf.compress); err != nil {
		return o, fmt.Errorf("--compress: %w", err)
	}
	o.Compression = lf.compress
	switch lf.encrypt {
	case "on":
	case "off":
		o.Plain = true
	default:
		return o, fmt.Errorf("--encrypt %q: want on or off", lf.encrypt)
	}
	o.Upgrade = lf.upgrade
	o.ResumeSeconds = lf.resume.Seconds()
	if lf.resume <= 0 {
		o.ResumeSeconds = -1
	}
	return o, nil
}

// resumeUsage is the help of --resume-timeout.
const resumeUsage = "how long a link waits for a path back when every connection beneath it died (a hub on the path, a cut), resending what they carried over one set up again, before it fails naming what died and when; 0: links are not resumable (the peer may agree to less: 30 s unless it says)"

// upgradeUsage is the help of --upgrade.
const upgradeUsage = "a resumable link set up routed, spliced or reverse moves to a more direct connection once one can be set up, while it runs (on by default: --upgrade=false keeps a link on the path it started on)"

// addUpgradeFlag adds --upgrade to c: on by default (issue 20's live
// path upgrade). It changes nothing before the first byte: the link is
// dialled by the same race (a cached method first), and only a link the
// race did not give direct looks for a better path afterwards.
func addUpgradeFlag(c *cobra.Command, v *bool) {
	c.Flags().BoolVar(v, "upgrade", true, upgradeUsage)
}

// serveResumeUsage is the help of a service's --resume-timeout.
const serveResumeUsage = "the longest a client's link waits for a path back when every connection beneath it died, resending what they carried, before it fails (a client may ask for less); 0: links are not resumable"

// serverResume is a service's ResumeTimeout for --resume-timeout d (0:
// not resumable).
func serverResume(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// addResumeFlag adds --resume-timeout to c.
func addResumeFlag(c *cobra.Command, d *time.Duration) {
	c.Flags().DurationVar(d, "resume-timeout", gridlink.DefaultResumeTimeout, resumeUsage)
}

// resumeOptions makes o resumable for d (0: not resumable).
func resumeOptions(o *gridlink.LinkOptions, d time.Duration) {
	o.Resume = d > 0
	o.Config.ResumeTimeout = d
}

func socksCmd() *cobra.Command {
	var lf linkFlags
	var listen, exit, users string
	var verbose bool
	c := &cobra.Command{
		Use:   "socks",
		Short: "serve SOCKS5 for unmodified programs: CONNECT to NAME.grid:PORT, BIND on the overlay",
		Long: `socks runs a SOCKS5 server whose connections go through this host's node
agent. CONNECT to NAME.grid:PORT reaches port PORT of node NAME however the
network allows; other hosts go through the node --exit (whose agent runs
with --allow-exit) or are refused. BIND listens on a free virtual port of
this node and tells the client NAME.grid:PORT for its peer.

It acts with your agent's credentials, so it serves only you: a client
on this host is served when the kernel says its socket is your uid's (or
root's), and any other account is refused ("connection not allowed by
ruleset"; the log says "socks of uid N refuses uid M"). Clients on other
hosts (with --listen beyond loopback) need a username and password from
--users (lines USER:PASSWORD), without which they are refused; a
password never admits another account of this host.`,
		Example: `  gridlink socks &
  curl --socks5-hostname 127.0.0.1:1080 http://hiroshi-n1.grid:8000/
  gridlink socks --listen 10.1.0.5:1080 --users /etc/gridlink/socks-users --exit das3v-fe`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			lo, err := lf.options()
			if err != nil {
				return err
			}
			sc := gridlink.SOCKSConfig{Listen: listen, Agent: control.Dial(lf.control), Exit: exit, Link: lo}
			if verbose {
				sc.Logger = logger()
			}
			if users != "" {
				if sc.Users, err = gridlink.LoadSOCKSUsers(users); err != nil {
					return err
				}
			}
			s, err := gridlink.ListenSOCKS(sc)
			if err != nil {
				return err
			}
			if s.LoopbackOnly() {
				fmt.Fprintf(os.Stderr, "gridlink socks: %s is not loopback and no --users given: only this host's clients of your uid will be served\n", listen)
			}
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = control.Dial(lf.control).Status(sctx)
			scancel()
			if err != nil {
				s.Close()
				return err
			}
			fmt.Fprintf(os.Stderr, "gridlink socks: listening on %s\n", s.Addr())
			ctx, cancel := signalContext()
			defer cancel()
			return s.Serve(ctx)
		},
	}
	lf.add(c)
	f := c.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:1080", "address of the SOCKS server")
	f.StringVar(&exit, "exit", "", "node that dials hosts outside the overlay (its agent needs --allow-exit)")
	f.StringVar(&users, "users", "", "file of USER:PASSWORD lines for clients on other hosts")
	f.BoolVarP(&verbose, "verbose", "v", false, "log failed requests")
	return c
}

func exposeCmd() *cobra.Command {
	var sock, name, local string
	var port int
	var allowPlain bool
	c := &cobra.Command{
		Use:   "expose LOCALPORT",
		Short: "publish a local TCP service on the overlay, as NODE.grid:PORT, while this command runs",
		Long: `expose asks this host's node agent to listen on a virtual port (LOCALPORT
unless --port says otherwise) and to join every link that arrives there to
a new TCP connection to 127.0.0.1:LOCALPORT (or --local). Other hosts reach
it as NODE.grid:PORT with gridlink socks, forward or nc; with --name also as
NODE:NAME (forward and nc: SOCKS ports are numbers), looked up in this
agent's service directory.`,
		Example: `  gridlink expose 22                        # this node's sshd, as NODE.grid:22
  gridlink expose 8000 --port 80 --name web  # a web server, as NODE.grid:80 and NODE:web`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lp, err := strconv.ParseUint(args[0], 10, 16)
			if err != nil || lp == 0 {
				return fmt.Errorf("LOCALPORT %q: want 1-65535", args[0])
			}
			if port == 0 {
				port = int(lp)
			}
			if port < 1 || port > 65535 {
				return fmt.Errorf("--port %d: want 1-65535", port)
			}
			if local == "" {
				local = net.JoinHostPort("127.0.0.1", args[0])
			}
			ctx, cancel := signalContext()
			defer cancel()
			return gridlink.Expose(ctx, control.Dial(sock), control.ExposeRequest{Local: local, Port: uint16(port), AllowPlain: allowPlain, Name: name}, func(addr string) {
				if name != "" {
					fmt.Fprintf(os.Stderr, "gridlink expose: %s reachable as %s and by name as %s:%s\n", local, addr, addr[:strings.LastIndexByte(addr, ':')], name)
					return
				}
				fmt.Fprintf(os.Stderr, "gridlink expose: %s reachable as %s\n", local, addr)
			})
		},
	}
	f := c.Flags()
	f.IntVar(&port, "port", 0, "virtual port (default LOCALPORT)")
	f.StringVar(&name, "name", "", "also name the service: others dial NODE:NAME (gridlink nc, forward)")
	f.StringVar(&local, "local", "", "TCP address to join links to (default 127.0.0.1:LOCALPORT)")
	f.BoolVar(&allowPlain, "allow-plain", false, "accept authenticated-plain links (--encrypt off)")
	f.StringVar(&sock, "control", "", "agent control socket (default: your agent's, then the system agent's @gridlink-agent)")
	return c
}

func forwardCmd() *cobra.Command {
	var lf linkFlags
	var verbose, allowRemote bool
	c := &cobra.Command{
		Use:   "forward LOCAL_ADDR NAME[.grid]:PORT",
		Short: "make a local TCP port lead to an overlay service",
		Long: `forward listens on LOCAL_ADDR and joins every connection to a new overlay
connection to NAME:PORT through your agent, with its credentials. So it
serves only you: a client on this host is served when the kernel says
its socket is your uid's (or root's); any other account is told
"forward of uid N refuses uid M" and its connection closed, and -v logs
the same. Clients on other hosts (LOCAL_ADDR beyond loopback) cannot be
identified: they are refused unless --allow-remote, with which anyone
who reaches the port acts as you.`,
		Example: `  gridlink forward 127.0.0.1:8080 hiroshi-n1.grid:80
  gridlink forward 127.0.0.1:5201 g5k-n1:5201 --streams 4`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			lo, err := lf.options()
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "gridlink forward: %s -> %s\n", ln.Addr(), args[1])
			if ta, ok := ln.Addr().(*net.TCPAddr); ok && !ta.IP.IsLoopback() && !allowRemote {
				fmt.Fprintf(os.Stderr, "gridlink forward: %s is not loopback and no --allow-remote given: only this host's clients of your uid will be served\n", ln.Addr())
			}
			ctx, cancel := signalContext()
			defer cancel()
			fc := gridlink.ForwardConfig{AllowRemote: allowRemote}
			if verbose {
				fc.Logger = logger()
			}
			return gridlink.Forward(ctx, ln, control.Dial(lf.control), control.ConnectRequest{Addr: args[1], Link: lo}, fc)
		},
	}
	lf.add(c)
	c.Flags().BoolVarP(&verbose, "verbose", "v", false, "log connections that fail or are refused")
	c.Flags().BoolVar(&allowRemote, "allow-remote", false, "serve clients of other hosts too (LOCAL_ADDR beyond loopback): anyone who reaches the port acts as you")
	return c
}

func ncCmd() *cobra.Command {
	var lf linkFlags
	c := &cobra.Command{
		Use:   "nc NAME[.grid]:PORT",
		Short: "join stdin and stdout to an overlay connection (for ssh's ProxyCommand)",
		Long: `nc joins stdin and stdout to a connection to NAME:PORT through the agent:
what stdin says is sent, its end half-closes the connection, and what the
far side sends goes to stdout until it closes. Port 7 (or NAME:echo) is
every agent's built-in echo: it answers raw, so nc's link options
(--streams, --compress, --encrypt) do not apply to it.`,
		Example: `  ssh -o ProxyCommand='gridlink nc %h:%p' user@g5k-n1.grid
  echo hello | gridlink nc das3v-n1:7`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lo, err := lf.options()
			if err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			return gridlink.NC(ctx, control.Dial(lf.control), control.ConnectRequest{Addr: args[0], Link: lo}, os.Stdin, os.Stdout)
		},
	}
	lf.add(c)
	return c
}
