package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/status"
)

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func hubCmd() *cobra.Command {
	var name, listen, keyFile, sshCfg, known, control, metricsAddr string
	var peers, ids, vipPrefixes []string
	var useSSH, verbose, announce bool
	var trunkConns, maxLinks int
	var trunkCC string
	var sf secFlags
	c := &cobra.Command{
		Use:   "hub",
		Short: "run a hub: links to other hubs, routes for the nodes attached to it",
		Example: `  gridlink hub --name das3v --listen 0.0.0.0:7946 --peer 198.51.100.42:7946
  gridlink hub --name das3d --peer ssh://root@198.51.100.129/127.0.0.1:7946   # through an sshd`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			creds, err := sf.files()
			if err != nil {
				return err
			}
			prefixes, err := parsePrefixes("--vip-prefix", vipPrefixes)
			if err != nil {
				return err
			}
			hc := gridlink.HubConfig{VIPPrefixes: prefixes, FallbackName: name, KeyFile: keyFile, Credentials: creds, Listen: listen, Peers: peers,
				SSH: sshConfig(useSSH, sshCfg, known, ids), Control: control, Announce: announce, Metrics: metricsAddr,
				TrunkConnections: trunkConns, TrunkCongestion: trunkCC, MaxLinks: maxLinks,
				Logger: logger()} // a hub logs its links, routes and refusals always (-v or not)
			if cmd.Flags().Changed("name") {
				hc.Name = name // else a hub certificate's name
			}
			h, err := gridlink.NewHub(hc)
			if err != nil {
				return flagWords(err)
			}
			if a := h.MetricsAddr(); a != nil {
				fmt.Fprintf(os.Stderr, "gridlink hub %s: metrics on http://%s/metrics\n", h.Name(), a)
			}
			ctx, cancel := signalContext()
			defer cancel()
			return h.Serve(ctx)
		},
	}
	f := c.Flags()
	f.StringVar(&name, "name", hostname(), "hub name, usually the site's (with --cert: the name it certifies)")
	f.StringVar(&listen, "listen", "0.0.0.0:7946", "address for hub links and node attachments")
	f.StringArrayVar(&vipPrefixes, "vip-prefix", nil, "a virtual network prefix of the grid, in which nodes may claim addresses (repeatable; default: "+gridlink.DefaultVIPPrefix4.String()+" and "+gridlink.DefaultVIPPrefix6.String()+", the nodes' --vip-prefix4/6)")
	f.StringArrayVar(&peers, "peer", nil, "another hub: HOST:PORT or ssh://[USER@]HOST[:PORT]/[TARGET:]PORT (repeatable)")
	f.StringVar(&keyFile, "key", "", "key file (created if missing); default: a fresh key")
	f.BoolVar(&useSSH, "ssh", false, "allow ssh:// peers with ~/.ssh defaults")
	f.StringVar(&sshCfg, "ssh-config", "", "ssh client config file (implies --ssh)")
	f.StringVar(&known, "known-hosts", "", "ssh known_hosts file (implies --ssh)")
	f.StringArrayVar(&ids, "identity", nil, "ssh private key file (repeatable, implies --ssh)")
	f.BoolVarP(&verbose, "verbose", "v", false, "log links, routes and circuits (a hub always does; kept for scripts)")
	f.BoolVar(&announce, "announce", false, "answer hub discovery queries (UDP multicast on this host's networks)")
	f.StringVar(&control, "control", HubControl, "status socket, which gridlink status --hub asks (another one for a second hub on this host)")
	f.StringVar(&metricsAddr, "metrics", "", metricsUsage)
	f.IntVar(&trunkConns, "trunk-connections", 0, "TCP connections per trunk this hub dials to another hub: 0 by the trunk's round trip (one per 10 ms, up to 8), 1 one (and refuse others' further ones)")
	f.StringVar(&trunkCC, "trunk-cc", "", `TCP congestion control between hubs: "" bbr where the kernel has it, "default" the kernel's, or a name`)
	f.IntVar(&maxLinks, "max-links", 0, "stop dialling the hubs learned through gossip at this many trunks to other hubs (0: the default, 6; -1: dial every one, a full mesh); --peer hubs are dialled anyway")
	sf.add(c)
	return withConfigFile(c)
}

func hostname() string { return gridlink.HostName() }

// nodeFlags are the flags of every command that runs a node.
type nodeFlags struct {
	name, keyFile, ports string
	hubs, prefer         []string
	verbose, discover    bool
	noReturn             bool
	portMap              bool
	useSSH               bool // ssh:// hubs and sshd tunnels, as a hub's --ssh
	sshCfg, known        string
	ids                  []string
	sec                  secFlags
	cmd                  *cobra.Command
}

func (nf *nodeFlags) add(c *cobra.Command, defaultName string) {
	nf.cmd = c
	f := c.Flags()
	f.StringVar(&nf.name, "name", defaultName, "node name, unique in the grid (with a node's --cert: the name it certifies)")
	f.StringArrayVar(&nf.hubs, "hub", nil, "hub to attach to, HOST:PORT or ssh://[USER@]HOST[:PORT]/[TARGET:]PORT (repeatable: tried in order; the first is the node's home, which it returns to when it is back)")
	f.BoolVar(&nf.noReturn, "no-return-home", false, "stay on the hub the node re-attached to after losing one, instead of returning to an earlier --hub once it is back")
	f.StringVar(&nf.keyFile, "key", "", "key file (created if missing); default: a fresh key")
	f.StringVar(&nf.ports, "ports", "", "confine the direct listener to LO-HI")
	f.StringArrayVar(&nf.prefer, "prefer", nil, "network to try first for direct connections (repeatable)")
	f.BoolVarP(&nf.verbose, "verbose", "v", false, "log connection setup")
	f.BoolVar(&nf.discover, "discover", false, "without --hub: find the site's hub by UDP multicast")
	f.BoolVar(&nf.portMap, "portmap", false, "ask the NAT gateway for an inbound port (UPnP IGD, NAT-PMP) and advertise it; deleted when the node stops")
	f.BoolVar(&nf.useSSH, "ssh", false, "also try direct connections through the targets' sshds (an ssh:// --hub needs no flag: it uses ~/.ssh defaults)")
	f.StringVar(&nf.sshCfg, "ssh-config", "", "ssh client config file for ssh:// hubs and tunnels (implies --ssh)")
	f.StringVar(&nf.known, "known-hosts", "", "ssh known_hosts file (implies --ssh)")
	f.StringArrayVar(&nf.ids, "identity", nil, "ssh private key file (repeatable, implies --ssh)")
	nf.sec.add(c)
}

// apiConfig checks the flags and returns the node's configuration; a
// hub it discovers (--discover) is reported as who's.
func (nf *nodeFlags) apiConfig(who string) (gridlink.Config, error) {
	creds, err := nf.sec.files()
	if err != nil {
		return gridlink.Config{}, err
	}
	pr, err := parsePorts(nf.ports)
	if err != nil {
		return gridlink.Config{}, err
	}
	pref, err := parsePrefixes("--prefer", nf.prefer)
	if err != nil {
		return gridlink.Config{}, err
	}
	cfg := gridlink.Config{FallbackName: nf.name, KeyFile: nf.keyFile, Credentials: creds, Hubs: nf.hubs, NoReturnHome: nf.noReturn, Discover: nf.discover,
		Ports: pr, Prefer: pref, PortMap: nf.portMap, SSH: sshConfig(nf.useSSH, nf.sshCfg, nf.known, nf.ids),
		Discovered: func(name string, addr netip.AddrPort) {
			fmt.Fprintf(os.Stderr, "%s: discovered hub %s at %s\n", who, name, addr)
		}}
	if nf.cmd != nil && nf.cmd.Flags().Changed("name") {
		cfg.Name = nf.name // else a node certificate's name
	}
	if nf.verbose {
		cfg.Logger = logger()
	}
	return cfg, nil
}

// hold is for long-running commands (node, serve, perf --serve): it
// reports the node's attachment (unless -v, whose session log says it)
// and returns a context that ends with ctx or when the hubs refuse the
// node for good, and what to return then: the refusal, or nil.
func hold(ctx context.Context, who string, n *gridlink.Node, verbose bool) (context.Context, func() error) {
	ctx, end := n.Hold(ctx)
	if !verbose {
		go n.WatchAttach(ctx, func(c gridlink.AttachChange) {
			if c.Attached {
				fmt.Fprintf(os.Stderr, "%s %s: attached to hub %s\n", who, c.Machine.Name, status.Printable(c.Machine.HubName))
				return
			}
			fmt.Fprintf(os.Stderr, "%s %s: %s\n", who, n.Name(), c.State)
		})
	}
	return ctx, func() error {
		if err := end(); err != nil {
			return fmt.Errorf("%s %w", who, err)
		}
		return nil
	}
}

func nodeCmd() *cobra.Command {
	var xf execFlags
	var nf nodeFlags
	var vf vipFlags
	var ef exitFlags
	var control, metricsAddr string
	c := &cobra.Command{
		Use:   "node",
		Short: "run this host's node agent (other gridlink commands talk to it)",
		Long: `node runs this host's node agent. It starts at once, also while no hub
answers (it keeps trying, and gridlink status says "attaching to HUB:
<reason>, retrying"); it re-attaches when its hub dies, and ends only when
stopped or when the hubs refuse it for good (its certificate, role or name).`,
		Example: `  gridlink node --name das3v-n1 --hub 198.51.100.10:7946
  gridlink node --hub 10.4.0.10:7946 --ports 40000-40100 --prefer 10.2.0.0/24
  gridlink node --hub 198.51.100.10:7946 --portmap   # behind a home router: ask it for an inbound port
  gridlink node --hub ssh://root@10.5.0.1/127.0.0.1:7946 --identity ~/.ssh/id_ed25519   # through the frontend's sshd
  gridlink node --hub 198.51.100.10:7946 --vip   # on the grid's virtual IP network (as root)
  gridlink node --hub 198.51.100.10:7946 --allow-exit --exit-allow 10.1.0.0/16:22,443   # an exit to the internet and to the site's ssh and https`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			cfg, err := nf.apiConfig("gridlink node")
			if err != nil {
				return err
			}
			vc, err := vf.config(cmd)
			if err != nil {
				return err
			}
			ac := gridlink.AgentConfig{Control: control, Node: cfg, VIP: vc, Metrics: metricsAddr}
			if err := ef.config(cmd, &ac); err != nil {
				return err
			}
			a, err := gridlink.StartAgent(ctx, ac)
			if err != nil {
				return flagWords(err)
			}
			stopExec, err := xf.start(a, cfg.Logger)
			if err != nil {
				a.Close()
				return err
			}
			defer stopExec()
			m := a.Node().Machine()
			who := "root only"
			if uid := os.Geteuid(); uid != 0 {
				who = fmt.Sprintf("uid %d and root only", uid)
			}
			where := "attached to hub " + m.HubName
			if st := a.Node().AttachState(); st != "" {
				where = st
			} else if len(cfg.Hubs) == 0 && !cfg.Discover {
				where = "without a hub"
			}
			fmt.Fprintf(os.Stderr, "gridlink node %s (%s) %s; addresses %v; control socket %s (%s)\n", m.Name, m.ID.Short(), where, m.Addrs, a.Control(), who)
			printVIPStart(a)
			if ma := a.MetricsAddr(); ma != nil {
				fmt.Fprintf(os.Stderr, "gridlink node %s: metrics on http://%s/metrics\n", m.Name, ma)
			}
			ctx, refused := hold(ctx, "gridlink node", a.Node(), nf.verbose)
			<-ctx.Done()
			if err := refused(); err != nil {
				a.Close()
				return err
			}
			return a.Close()
		},
	}
	nf.add(c, hostname())
	xf.add(c)
	c.Flags().StringVar(&control, "control", "", "control socket, which only this uid and root may use (default: @gridlink-agent for root, else $XDG_RUNTIME_DIR/gridlink/agent.sock or /tmp/gridlink-UID/agent.sock)")
	vf.add(c)
	ef.add(c)
	c.Flags().StringVar(&metricsAddr, "metrics", "", metricsUsage)
	return withConfigFile(c)
}

// metricsUsage is --metrics' help, the same for hubs and nodes.
const metricsUsage = "serve Prometheus metrics on http://ADDR/metrics (HOST:PORT; :PORT binds " + gridlink.DefaultMetricsHost + " only; anyone who reaches it may read it); default: off"

func pingCmd() *cobra.Command {
	var count, dials int
	var fresh, asJSON bool
	var sock string
	c := &cobra.Command{
		Use:   "ping NODE[:PORT][@HUB]",
		Short: "set up connections to a node's echo service: setup time, method, round-trip time",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := control.Dial(sock).Ping(ctx, control.PingRequest{Addr: args[0], Count: count, Dials: dials, Fresh: fresh})
			if err != nil {
				return err
			}
			if asJSON {
				if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
					return err
				}
				if res.Error != "" {
					return fmt.Errorf("ping %s: %s", args[0], res.Error)
				}
				return nil
			}
			for i, m := range res.Methods {
				what := "uncached"
				if i > 0 {
					what = "cached"
				}
				fmt.Printf("connection %d to %s: %s, set up in %.1f ms (%s)\n", i+1, res.Peer, m, res.SetupMS[i], what)
			}
			if len(res.RTTMS) > 0 {
				var parts []string
				for _, r := range res.RTTMS {
					parts = append(parts, fmt.Sprintf("%.2f", r))
				}
				fmt.Printf("round trips: %s ms\n", strings.Join(parts, " "))
			}
			if res.Error != "" {
				return fmt.Errorf("ping %s: %s", args[0], res.Error)
			}
			return nil
		},
	}
	f := c.Flags()
	f.IntVarP(&count, "count", "c", 3, "round trips on the first connection")
	f.IntVar(&dials, "dials", 2, "connections to set up one after another (the first uncached)")
	f.BoolVar(&fresh, "fresh", false, "forget cached methods, names, addresses and spare connections first")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.StringVar(&sock, "control", "", "agent control socket (default: your agent's, then the system agent's @gridlink-agent)")
	return c
}

func statusCmd() *cobra.Command {
	var sock string
	var asJSON, ofHub bool
	c := &cobra.Command{
		Use:   "status",
		Short: "show this node (identity, hub, connections and their methods) or, with --hub, this host's hub (routes, links, nodes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if ofHub {
				if sock == "" {
					sock = HubControl
				}
				return hubStatus(ctx, sock, asJSON)
			}
			st, err := control.Dial(sock).Status(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(st)
			}
			fmt.Printf("node %s (%s)\n  hub: %s\n  addresses: %v\n  seen by the hub as: %s\n",
				status.Printable(st.Node.Name), st.Node.ID.Short(), st.HubWords(), st.Node.Addrs, st.Observed)
			printCredentials(st.Credentials)
			fmt.Printf("connections: %d\n", len(st.Conns))
			for _, c := range st.Conns {
				fmt.Printf("  %s -> %s  %s\n", c.Local, status.Printable(c.Remote), c.Method)
			}
			printStreamLinks(st.Links)
			for h, m := range st.Cache {
				fmt.Printf("cached: hub %s -> %s\n", h, m)
			}
			fmt.Printf("%s\n%s\n", st.NAT.Words(), st.PortMap.Words())
			printVIPStatus(st.VIP)
			return nil
		},
	}
	c.Flags().StringVar(&sock, "control", "", "agent control socket (default: your agent's, then the system agent's @gridlink-agent); with --hub, the hub's status socket (default @gridlink-hub)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().BoolVar(&ofHub, "hub", false, "show the hub running on this host")
	return c
}

// printStreamLinks prints the links of the agent's streams, each with its
// path now and its live path upgrades.
func printStreamLinks(links []status.StreamLink) {
	if len(links) == 0 {
		return
	}
	fmt.Printf("stream links: %d\n", len(links))
	for _, l := range links {
		var more []string
		if l.Resumable {
			more = append(more, "resumable")
		}
		if l.Upgrade {
			more = append(more, "upgrading")
		}
		fmt.Printf("  stream %d -> %s  %s", l.Stream, status.Printable(l.Remote), l.Method)
		if len(more) > 0 {
			fmt.Printf(" (%s)", strings.Join(more, ", "))
		}
		fmt.Println()
		for _, sw := range l.Switches {
			fmt.Printf("    switched %s -> %s at %s\n", sw.From, sw.To, sw.At.Format("15:04:05.000"))
		}
	}
}
