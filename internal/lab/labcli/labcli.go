// Package labcli is the gridlab command line: it parses flags, calls the lab
// packages (lab, topology, matrix) and prints. The lab itself lives in those
// packages; cmd/gridlab only calls Main.
package labcli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/topologies"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// Main runs the gridlab command line on os.Args and exits non-zero on an
// error.
func Main() {
	root := &cobra.Command{
		Use:           "gridlab",
		Short:         "gridlab runs an emulated grid of firewalled, NATed, non-routed and multi-homed sites",
		SilenceUsage:  true,
		SilenceErrors: true,
		Long: `gridlab runs an emulated grid of firewalled, NATed, non-routed and multi-homed
sites on this machine: hosts are network namespaces, wide-area links run
through a userspace emulator with delay, rate limit and loss. One lab runs at
a time. Built-in topologies: ` + strings.Join(topologies.Names(), ", ") + `.`,
	}
	root.AddCommand(upCmd(), downCmd(), execCmd(), hostsCmd(), matrixCmd(), traversalCmd(), overlayCmd(), certCmd(), emulateCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gridlab:", err)
		os.Exit(1)
	}
}

func parseSets(sets []string) (map[string]string, error) {
	params := map[string]string{}
	for _, s := range sets {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--set %q: want NAME=VALUE", s)
		}
		params[k] = v
	}
	return params, nil
}

func upCmd() *cobra.Command {
	var sets []string
	var dry bool
	c := &cobra.Command{
		Use:   "up TOPOLOGY",
		Short: "build a topology (a built-in name or a .topo file) and start its links",
		Example: `  gridlab up grid6
  gridlab up grid6 --set factor=1.0          # the paper's round-trip times
  gridlab up wan --set rtt=40ms --set rate=400mbit --set loss=0.1%
  gridlab up nat-zoo --dry-run                # print the commands, change nothing`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			params, err := parseSets(sets)
			if err != nil {
				return err
			}
			t, src, err := lab.Load(args[0], params)
			if err != nil {
				return err
			}
			if dry {
				for _, s := range lab.Plan(t) {
					fmt.Println(s.Shell())
				}
				return nil
			}
			start := time.Now()
			if err := lab.Up(t, src, lab.Options{Params: params, Log: os.Stderr}); err != nil {
				return err
			}
			fmt.Printf("lab %s is up: %d sites, %d hosts (%.1fs). gridlab hosts lists them; gridlab down removes them.\n",
				t.Name, len(t.Sites), len(t.Hosts()), time.Since(start).Seconds())
			return nil
		},
	}
	c.Flags().StringArrayVar(&sets, "set", nil, "set a topology parameter, NAME=VALUE (repeatable)")
	c.Flags().BoolVar(&dry, "dry-run", false, "print the ip and nft commands instead of running them")
	return c
}

func downCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "tear down the lab (also what a crashed run left behind)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			removed, err := lab.Down()
			if len(removed) == 0 && err == nil {
				fmt.Println("no lab was up; nothing left behind")
			} else if err == nil {
				fmt.Printf("removed %d namespaces and files: %s\n", len(removed), strings.Join(removed, " "))
			}
			return err
		},
	}
}

func execCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "exec HOST -- COMMAND [ARGS...]",
		Short: "run a command on a lab host (SITE-HOST, a unique host name, or SITE-gw for a gateway)",
		Example: `  gridlab exec das3v-n1 -- ip addr
  gridlab exec desktop -- ping -c1 198.51.100.11
  gridlab exec hiroshi-gw -- nft list ruleset`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return errors.New("want: gridlab exec HOST -- COMMAND [ARGS...]")
			}
			t, _, err := lab.Running()
			if err != nil {
				return err
			}
			ns, err := namespaceOf(t, args[0])
			if err != nil {
				return err
			}
			ip, err := exec.LookPath("ip")
			if err != nil {
				return err
			}
			return syscall.Exec(ip, append([]string{"ip", "netns", "exec", ns}, args[1:]...), os.Environ())
		},
	}
}

func namespaceOf(t *topology.Topology, name string) (string, error) {
	if site, ok := strings.CutSuffix(name, "-gw"); ok && t.Site(site) != nil {
		return lab.GatewayNS(t.Site(site)), nil
	}
	h, err := t.Host(name)
	if err != nil {
		return "", err
	}
	return lab.HostNS(h), nil
}

func hostsCmd() *cobra.Command {
	var sets []string
	return &cobra.Command{
		Use:   "hosts [TOPOLOGY]",
		Short: "list sites, hosts and addresses of the running lab (or of a topology)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var t *topology.Topology
			var err error
			status := "not up"
			if len(args) == 1 {
				params, perr := parseSets(sets)
				if perr != nil {
					return perr
				}
				t, _, err = lab.Load(args[0], params)
			} else {
				var st *lab.State
				t, st, err = lab.Running()
				if st != nil {
					status = fmt.Sprintf("up since %s, emulator pid %d", st.Started.Format(time.DateTime), st.EmulatorPID)
				}
			}
			if t == nil {
				return err
			}
			fmt.Printf("topology %s (%s)\n", t.Name, status)
			if err != nil {
				fmt.Println("warning:", err)
			}
			printHosts(t)
			return nil
		},
	}
}

func printHosts(t *topology.Topology) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "SITE\tHOST\tROLE\tNAMESPACE\tADDRESSES\tROUTE")
	for _, s := range t.Sites {
		var feats []string
		if s.Firewall != topology.FirewallNone {
			feats = append(feats, "firewall="+s.Firewall)
		}
		if s.NAT != topology.NATNone {
			feats = append(feats, "nat="+s.NAT)
		}
		for _, p := range s.In {
			feats = append(feats, "in "+p.String())
		}
		for _, p := range s.Out {
			feats = append(feats, "out "+p.String())
		}
		for _, f := range s.Forwards {
			feats = append(feats, fmt.Sprintf("forward %s/%d->%s", f.Proto, f.Port, f.Host.Name))
		}
		fmt.Fprintf(w, "%s\tgw\tgateway\t%s\twan0 %s\t%s\n", s.Name, lab.GatewayNS(s), s.WAN, strings.Join(feats, " "))
		for _, h := range s.Hosts {
			var addrs []string
			for _, ifc := range h.Ifaces {
				addrs = append(addrs, fmt.Sprintf("%s %s", ifc.Net.Name, ifc.Addr))
			}
			route := "non-routed"
			if gw, n, ok := h.DefaultRoute(); ok {
				route = fmt.Sprintf("default via %s (%s)", gw, n.Kind)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, h.Name, h.Role, lab.HostNS(h), strings.Join(addrs, ", "), route)
		}
	}
	w.Flush()
	fmt.Println("\nlinks (one-way delay, rate, loss):")
	for _, l := range t.Links {
		fmt.Printf("  %s - %s: %v, %s, %g%%\n", l.A, l.B, l.Delay, rateString(l.Rate), l.Loss*100)
	}
	if d := t.Default; d != nil {
		fmt.Printf("  every other pair: %v, %s, %g%%\n", d.Delay, rateString(d.Rate), d.Loss*100)
	}
}

func rateString(r int64) string {
	switch {
	case r == 0:
		return "unlimited"
	case r%1e9 == 0:
		return fmt.Sprintf("%dgbit", r/1e9)
	case r%1e6 == 0:
		return fmt.Sprintf("%dmbit", r/1e6)
	}
	return fmt.Sprintf("%dbit", r)
}
