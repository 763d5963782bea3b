package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/dashboard"
)

func dashboardCmd() *cobra.Command {
	var nf nodeFlags
	var listen, control, members, membersMap, membersCert, membersKey string
	var hubs []string
	var port int
	var noBrowser bool
	var interval time.Duration
	c := &cobra.Command{
		Use:   "dashboard",
		Short: "a live web view of the overlay, your connections and transfers (on loopback, for you only)",
		Long: `dashboard serves a web page on loopback, as you, and prints its address
with a secret token (and opens it with xdg-open where there is one,
through a file only you can read: the token goes on no command line). The
page shows the overlay (hubs, their links with round trips and state,
nodes at their hubs: read from the hub status sockets of this host,
--hub-status), your agent's connections with a live throughput graph and
its virtual network's peers, and transfers: start one between transfer
services (gridlink serve; NAME:PATH as gridlink cp reads it, a
third-party push between two services delegating your --proxy to the
source), and pause, resume or cancel them, one or many.

Only you may use it: every request needs the token (the address once,
then an HttpOnly cookie; changes also a header the page sends), a
connection from another user is refused even with the token, and the
agent behind it answers only its own user. The flags of the node each
transfer runs (--hub, --ca, --proxy, ...) are gridlink cp's.

--members ADDR opens it to the grid's members as well, over HTTPS at
ADDR: a member signs on with a grid user certificate or a proxy of one
(checked against --ca and --crl; a proxy restricted to services must
allow "dashboard"), and sees what you see but changes nothing; the
dashboard presents the certificate of --cert/--key or --proxy, or, for
browsers (which do not take the grid's Ed25519 certificates), the host's
web server certificate (--members-cert, --members-key). Members
whose subject --members-mapfile (a grid-mapfile) maps to your account
may start, pause and cancel transfers too. A refused member gets the
reason (403), which the dashboard logs in the same words.`,
		Example: `  gridlink dashboard --hub 198.51.100.10:7946 --ca grid-ca.pem --proxy ~/.gridlink/proxy.pem
  gridlink dashboard --hub-status @gridlink-hub --hub-status /run/gridlink/hub2.sock   # a host running hubs
  gridlink dashboard --ca grid-ca.pem --crl grid-crl.pem --key node.key --cert node.pem --members :8443   # also for the grid's members`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := nf.apiConfig("gridlink dashboard")
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("hub-status") {
				hubs = nil // the default: gridlink.HubControl
			}
			d, err := dashboard.New(dashboard.Config{Listen: listen, Control: control, Hubs: hubs, Interval: interval, Logger: logger(),
				Copy:    gridlink.CopyConfig{Node: cfg, ProxyFile: nf.sec.proxyFile, Port: port},
				Members: dashboard.MembersConfig{Listen: members, MapFile: membersMap, CertFile: membersCert, KeyFile: membersKey}})
			switch {
			case errors.Is(err, dashboard.ErrNotLoopback):
				return fmt.Errorf("--listen %q: the dashboard listens on loopback only (127.0.0.1:PORT, [::1]:PORT, localhost:PORT)", listen)
			case errors.Is(err, dashboard.ErrMembersNeedGrid):
				return errors.New("--members: members sign on with grid certificates: it needs --ca, and --cert with --key or --proxy for the dashboard's own certificate")
			}
			if err != nil {
				return err
			}
			fmt.Printf("gridlink dashboard: %s\n", d.URL())
			if u := d.MembersURL(); u != "" {
				fmt.Printf("gridlink dashboard: for the grid's members (their certificates): %s\n", u)
			}
			if !noBrowser {
				defer openBrowser(d.URL())()
			}
			ctx, cancel := signalContext()
			defer cancel()
			return d.Serve(ctx)
		},
	}
	nf.add(c, fmt.Sprintf("dash-%s-%d", hostname(), os.Getpid()))
	f := c.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:0", "where the page is served (loopback only)")
	f.StringVar(&control, "control", "", "your agent's control socket (default: your agent's, then the system agent's)")
	f.StringArrayVar(&hubs, "hub-status", []string{gridlink.HubControl}, "a hub status socket to read for the overlay map (repeatable)")
	f.IntVar(&port, "port", gridlink.TransferPort, "virtual port of the transfer services")
	f.BoolVar(&noBrowser, "no-browser", false, "do not open a browser")
	f.StringVar(&members, "members", "", "also serve the grid's members over HTTPS at this address, signed on with their grid certificates (read only; off by default)")
	f.StringVar(&membersCert, "members-cert", "", "the certificate (PEM) the members' listener presents instead of the grid's, for browsers: e.g. the host's web server certificate")
	f.StringVar(&membersKey, "members-key", "", "the key (PEM) of --members-cert")
	f.StringVar(&membersMap, "members-mapfile", "", `a grid-mapfile ("SUBJECT" ACCOUNT[,ACCOUNT...]): members it maps to your account may change transfers too`)
	f.DurationVar(&interval, "interval", time.Second, "how often the page is updated")
	return withConfigFile(c)
}
