// The matrix, traversal, overlay, cert and emulate commands: they run the
// product inside a lab that is up (or bring one up for the command).

package labcli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/pki/ca"
)

func matrixCmd() *cobra.Command {
	var sets, pairs []string
	var asJSON, withGridlink, bounds, open, paper bool
	var timeout time.Duration
	var gridlinkBin string
	c := &cobra.Command{
		Use:   "matrix TOPOLOGY",
		Short: "connect from a compute node of every site to one of every other site and report which pairs work",
		Long: `matrix connects from the representative host of every site (a compute node,
or the only machine) to that of every other site with plain TCP, and prints
the setup times laid out like Table 3 of the SmartSockets paper (rows are
targets, columns sources), or JSON with --json. It uses the running lab if it
is TOPOLOGY, else brings TOPOLOGY up for the run and down afterwards.
--bounds checks gridlink's setup times against the connectivity core's
targets; --paper sets them beside SmartSockets' Table 3 (grid6, at the
paper's round trips with --set factor=1.0); --pair SRC:DST measures only
the pairs it names.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			params, err := parseSets(sets)
			if err != nil {
				return err
			}
			ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer cancel()
			t, done, err := ensureUp(args[0], params)
			if err != nil {
				return err
			}
			defer done()
			keep, err := pairFilter(t, pairs)
			if err != nil {
				return err
			}
			m, err := matrix.PlainPairs(ctx, t, timeout, keep)
			if err != nil {
				return err
			}
			if (bounds || paper) && !withGridlink {
				return errors.New("--bounds and --paper need --gridlink")
			}
			if withGridlink {
				bin := gridlinkBin
				if bin == "" {
					exe, _ := os.Executable()
					bin = filepath.Join(filepath.Dir(exe), "gridlink")
				}
				start := matrix.StartOverlay
				if open {
					start = matrix.StartOpenOverlay
				}
				o, err := start(ctx, t, bin)
				if err != nil {
					return err
				}
				o.AddGridlink(ctx, m, 45*time.Second)
				o.Stop()
			}
			if asJSON {
				return m.WriteJSON(os.Stdout)
			}
			if bounds {
				matrix.WriteBounds(os.Stdout, matrix.Bounds(m, t))
			}
			if paper {
				rows, err := matrix.Paper(m, t)
				if err != nil {
					return err
				}
				if bounds {
					fmt.Println()
				}
				matrix.WritePaper(os.Stdout, rows)
			}
			if bounds || paper {
				return nil
			}
			fmt.Println("connection setup time in ms from a compute node of each source site (columns) to one of each target site (rows); - = no connection")
			if withGridlink {
				m.WriteTable(os.Stdout, []string{"plain TCP", "gridlink (uncached; d direct, r reverse, s splice, v routed)"}, []matrix.Cell{matrix.PlainCell, matrix.GridlinkCell})
				fmt.Printf("\nplain TCP connects %d of %d site pairs; gridlink connects %d\n", m.Summary.PlainOK, m.Summary.Total, *m.Summary.GridlinkOK)
			} else {
				m.WriteTable(os.Stdout, []string{"plain TCP"}, []matrix.Cell{matrix.PlainCell})
				fmt.Printf("\nplain TCP connects %d of %d site pairs\n", m.Summary.PlainOK, m.Summary.Total)
			}
			return nil
		},
	}
	c.Flags().StringArrayVar(&sets, "set", nil, "set a topology parameter, NAME=VALUE (repeatable)")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	c.Flags().DurationVar(&timeout, "timeout", time.Second, "give up on a plain connection after this long")
	c.Flags().BoolVar(&withGridlink, "gridlink", true, "also connect through gridlink (hubs on frontends, agents on the nodes)")
	c.Flags().StringVar(&gridlinkBin, "gridlink-bin", "", "the gridlink binary (default: beside gridlab)")
	c.Flags().BoolVar(&bounds, "bounds", false, "check gridlink setup times against the connectivity core's targets")
	c.Flags().BoolVar(&open, "open", false, "run the overlay as an open grid, without the lab CA (the baseline of admission's cost)")
	c.Flags().BoolVar(&paper, "paper", false, "set gridlink's setup times beside SmartSockets' Table 3 and check them against its bounds (grid6; --set factor=1.0 for the paper's round trips)")
	c.Flags().StringArrayVar(&pairs, "pair", nil, "measure only this ordered pair of sites, SRC:DST (repeatable)")
	return c
}

// pairFilter admits the ordered pairs of sites pairs names (SRC:DST
// each; none: every pair), or says which name no site of t has.
func pairFilter(t *topology.Topology, pairs []string) (func(src, dst string) bool, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	want := map[[2]string]bool{}
	for _, p := range pairs {
		src, dst, ok := strings.Cut(p, ":")
		if !ok || src == dst {
			return nil, fmt.Errorf("--pair %q: want SRC:DST, two different sites", p)
		}
		for _, s := range []string{src, dst} {
			if t.Site(s) == nil {
				return nil, fmt.Errorf("--pair %q: %s has no site %q", p, t.Name, s)
			}
		}
		want[[2]string{src, dst}] = true
	}
	return func(src, dst string) bool { return want[[2]string{src, dst}] }, nil
}

func traversalCmd() *cobra.Command {
	var asJSON bool
	var attempts int
	var hubName, gridlinkBin string
	c := &cobra.Command{
		Use:   "traversal [TOPOLOGY]",
		Short: "connect every pair of hosts through gridlink many times and report methods, splice success and setup times",
		Long: `traversal runs a hub on one public host (port 443) and a node agent on every
host of TOPOLOGY (default nat-zoo), then makes --attempts uncached connections
from every host to every other. For each pair it reports the sites' firewall
and NAT kinds, the method the topology calls for (direct, reverse, splice or
routed), the methods that won, the share of attempts that spliced where a
splice is expected, and the median setup time. It uses the running lab if
it is TOPOLOGY, else brings it up for the run and down afterwards. Port
mapping is not used.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := "nat-zoo"
			if len(args) == 1 {
				name = args[0]
			}
			if attempts < 1 {
				return errors.New("--attempts must be at least 1")
			}
			ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer cancel()
			t, done, err := ensureUp(name, nil)
			if err != nil {
				return err
			}
			defer done()
			hub, err := t.Host(hubName)
			if err != nil {
				return fmt.Errorf("--hub: %w", err)
			}
			bin := gridlinkBin
			if bin == "" {
				exe, _ := os.Executable()
				bin = filepath.Join(filepath.Dir(exe), "gridlink")
			}
			o, hosts, err := matrix.StartTraversalOverlay(ctx, t, bin, hub)
			if err != nil {
				return err
			}
			defer o.Stop()
			rep := o.Traversal(ctx, hub, hosts, attempts, os.Stderr)
			if asJSON {
				return rep.WriteJSON(os.Stdout)
			}
			rep.WriteTable(os.Stdout)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	c.Flags().IntVar(&attempts, "attempts", 20, "uncached connections per ordered pair")
	c.Flags().StringVar(&hubName, "hub", "public-server", "the host that runs the hub (needs a public address)")
	c.Flags().StringVar(&gridlinkBin, "gridlink-bin", "", "the gridlink binary (default: beside gridlab)")
	return c
}

// ensureUp returns the running lab if it is topology name with these
// parameters, else brings it up; done takes down a lab it brought up.
func ensureUp(name string, params map[string]string) (t *topology.Topology, done func(), err error) {
	want, src, err := lab.Load(name, params)
	if err != nil {
		return nil, nil, err
	}
	if t, st, err := lab.Running(); err == nil && st.Source == string(src) && sameParams(st.Params, params) {
		return t, func() {}, nil
	}
	fmt.Fprintf(os.Stderr, "gridlab: bringing up %s for this run\n", want.Name)
	if err := lab.Up(want, src, lab.Options{Params: params, Log: os.Stderr}); err != nil {
		return nil, nil, err
	}
	return want, func() {
		if _, err := lab.Down(); err != nil {
			fmt.Fprintln(os.Stderr, "gridlab: tear down:", err)
		}
	}, nil
}

func sameParams(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func overlayCmd() *cobra.Command {
	var gridlinkBin string
	var open, vip bool
	c := &cobra.Command{
		Use:   "overlay",
		Short: "run gridlink in the running lab: a hub on every site's frontend, a node agent on its compute node (until interrupted)",
		Example: `  gridlab up grid6 && gridlab overlay &
  gridlab exec das3v-n1 -- bin/gridlink ping g5k-n1
  gridlab exec desktop -- bin/gridlink doctor hiroshi-n1
  gridlab exec das3v-fe -- bin/gridlink status --hub`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, _, err := lab.Running()
			if err != nil {
				return err
			}
			bin := gridlinkBin
			if bin == "" {
				exe, _ := os.Executable()
				bin = filepath.Join(filepath.Dir(exe), "gridlink")
			}
			ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer cancel()
			o, err := matrix.StartOverlayWith(ctx, t, bin, matrix.Options{Open: open, VIP: vip})
			if err != nil {
				return err
			}
			defer o.Stop()
			for _, v := range o.VIPs() {
				fmt.Fprintf(os.Stderr, "%s: virtual network on %s: %s %s\n", v.Name, v.Device, v.V4, v.V6)
			}
			admission := fmt.Sprintf("admission by the lab CA in %s; `gridlab cert NAME` certifies one more node", lab.CADir())
			if open {
				admission = "an open grid, any key admitted"
			}
			fmt.Fprintf(os.Stderr, "gridlink overlay running in lab %s, %s (logs in %s/gridlink-*.log); interrupt to stop\n", t.Name, admission, lab.StateDir)
			<-ctx.Done()
			return nil
		},
	}
	c.Flags().StringVar(&gridlinkBin, "gridlink-bin", "", "the gridlink binary (default: beside gridlab)")
	c.Flags().BoolVar(&open, "open", false, "run an open grid, without the lab CA")
	c.Flags().BoolVar(&vip, "vip", false, "start every node agent with --vip (the virtual IP network) and print its virtual addresses")
	return c
}

func certCmd() *cobra.Command {
	var role string
	c := &cobra.Command{
		Use:   "cert NAME",
		Short: "issue a hub or node a key and certificate of the lab's CA and print its gridlink flags",
		Long: `The overlays gridlab starts run with admission on: their hubs and nodes
hold certificates of a CA made for the lab (in ` + lab.CADir() + `, removed by
gridlab down). A gridlink command that runs a node of its own (perf, serve,
cp) or another hub needs one too: cert makes a new identity key, certifies it
and prints the flags that name them (--ca, --crl, --key, --cert).`,
		Example: `  gridlab exec das3v-n2 -- bin/gridlink perf --serve --name p --hub 198.51.100.10:7946 $(gridlab cert p)`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, _, err := lab.Running(); err != nil {
				return err
			}
			c, err := lab.OpenCA()
			if err != nil {
				return err
			}
			i, err := c.Issue(ca.Role(role), args[0])
			if err != nil {
				return err
			}
			fmt.Println(strings.Join(i.Args(), " "))
			return nil
		},
	}
	c.Flags().StringVar(&role, "role", "node", "hub or node")
	return c
}

func emulateCmd() *cobra.Command {
	var state string
	c := &cobra.Command{
		Use:    lab.EmulateCmd,
		Short:  "run the link emulator of the lab (started by gridlab up)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return lab.Emulate(state, os.Stdout)
		},
	}
	c.Flags().StringVar(&state, "state", "", "lab state file")
	return c
}
