package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/status"
)

func doctorCmd() *cobra.Command {
	var sock string
	var asJSON bool
	c := &cobra.Command{
		Use:   "doctor [NODE[:PORT]]",
		Short: "explain what this host can reach and, for a target, which methods work and why the others fail",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			addr := ""
			if len(args) == 1 {
				addr = args[0]
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			d, err := control.Dial(sock).Doctor(ctx, addr)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(d)
			}
			fmt.Printf("this host: node %s (%s)\n", status.Printable(d.Node.Name), d.Node.ID.Short())
			for _, f := range append(d.Host, d.NAT.Words(), d.PortMap.Words()) {
				fmt.Printf("  - %s\n", f)
			}
			expired := printCredentials(d.Credentials) // fails doctor
			if addr == "" {
				return expired
			}
			if d.Target != nil {
				fmt.Printf("target: %s, addresses %v (found in %.1f ms)\n", d.Target, d.Target.Addrs, d.LookupMS)
			}
			for _, m := range d.Methods {
				if m.OK {
					fmt.Printf("  %-8s works (%.1f ms)\n", m.Method, m.MS)
				} else {
					fmt.Printf("  %-8s fails: %s\n", m.Method, status.PrintableLine(m.Why))
				}
			}
			fmt.Println(d.Verdict)
			return expired
		},
	}
	c.Flags().StringVar(&sock, "control", "", "agent control socket (default: your agent's, then the system agent's @gridlink-agent)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// HubControl is the hub's status socket that hub serves and status --hub
// asks by default.
const HubControl = gridlink.HubControl

func hubStatus(ctx context.Context, control string, asJSON bool) error {
	st, err := gridlink.QueryHub(ctx, control)
	var nh *gridlink.NoHubError
	if errors.As(err, &nh) {
		return fmt.Errorf("no gridlink hub runs here (%v): start one with `gridlink hub`", nh.Err)
	}
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(st)
	}
	// Names are escaped (status.Printable): a hub's comes from the hubs'
	// gossip, a node's from its hello.
	fmt.Printf("hub %s (%s) on %s\n\nroutes:\n", status.Printable(st.Name), st.ID.Short(), st.Addr)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  HUB\tNEXT HOP\tHOPS\tLATENCY\tNODES\tSTATE")
	names := map[gridlink.ID]string{st.ID: status.Printable(st.Name)}
	for _, r := range st.Routes {
		names[r.Hub] = status.Printable(r.Name)
	}
	for _, r := range st.Routes {
		next := names[r.NextHop]
		if !r.Reachable {
			next = "unreachable"
		}
		fmt.Fprintf(w, "  %s\t%s\t%d\t%v\t%d\t%d\n", names[r.Hub], next, r.Hops, msDuration(r.LatencyMS), r.Nodes, r.State)
	}
	w.Flush()
	fmt.Println("\nlinks:")
	for _, l := range st.Links {
		dir := "accepted"
		if l.Dialed {
			dir = "dialled"
		}
		remote := l.Remote.String()
		if !l.Remote.IsValid() {
			remote = "(through a tunnel)"
		}
		trunk := ""
		if l.Role == "hub" && l.Connections > 0 {
			trunk = fmt.Sprintf(" connections %d", l.Connections)
			if l.Congestion != "" {
				trunk += " " + l.Congestion
			}
		}
		fmt.Printf("  %-4s %-12s %-22s %-8s rtt %-10v circuits %d%s\n", l.Role, status.Printable(l.Name), remote, dir, msDuration(l.RTTMS), l.Circuits, trunk)
	}
	var nodes []string
	for _, n := range st.Nodes {
		nodes = append(nodes, status.Printable(n.Name))
	}
	fmt.Printf("\nnodes attached: %d %s\n", len(st.Nodes), strings.Join(nodes, " "))
	return nil
}

// msDuration is ms milliseconds as a duration, to the microsecond.
func msDuration(ms float64) time.Duration {
	return time.Duration(ms * float64(time.Millisecond)).Round(time.Microsecond)
}

// printCredentials prints the node's credentials and their lifetimes
// (status, doctor): a warning for one expiring, a failure for one
// expired, which it returns.
func printCredentials(creds []status.Credential) error {
	if len(creds) == 0 {
		return nil
	}
	var expired error
	now := time.Now()
	fmt.Println("credentials:")
	for _, c := range creds {
		mark := "ok"
		switch c.State {
		case status.CredExpiring:
			mark = "WARN"
		case status.CredExpired:
			mark = "FAIL"
			if expired == nil {
				expired = &CredentialExpiredError{Credential: c}
			}
		}
		fmt.Printf("  %-4s %s\n", mark, c.Words(now))
	}
	return expired
}

// CredentialExpiredError fails doctor: one of the node's credentials
// expired.
type CredentialExpiredError struct{ Credential status.Credential }

func (e *CredentialExpiredError) Error() string {
	c := e.Credential
	return fmt.Sprintf("the %s expired at %s: %s", c.Name(), c.NotAfter.UTC().Format(time.RFC3339), c.Remedy())
}
