package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/vconn"
)

// TEMPORARY, for cp.go and delegate.go only (serve, cp, third-party
// pushes), which the helper apicp moves onto the product API this
// session: the node start-up they use today, on vconn. Delete this file
// (and its entry in internal/archtest's cli allow-list) when they call
// gridlink.Start / gridlink.StartAttached and Node.Hold instead, as node
// and perf do.

// config checks the flags and returns the node's vconn configuration,
// discovering the site's hub if asked to.
func (nf *nodeFlags) config(ctx context.Context, who string) (vconn.Config, error) {
	cfg, err := nf.apiConfig(who)
	if err != nil {
		return vconn.Config{}, err
	}
	key, err := loadKey(nf.keyFile)
	if err != nil {
		return vconn.Config{}, err
	}
	creds, _, err := cfg.Credentials.Load(key)
	if err != nil {
		return vconn.Config{}, flagWords(err)
	}
	hubs := cfg.Hubs
	if cfg.Discover && len(hubs) == 0 {
		found, err := gridlink.DiscoverHubs(ctx)
		if err != nil {
			return vconn.Config{}, err
		}
		for _, f := range found {
			hubs = append(hubs, f.Addr.String())
		}
		cfg.Discovered(found[0].Name, found[0].Addr)
	}
	name := cfg.Name
	if name == "" {
		name = creds.DefaultName(nf.name) // a node certificate binds its name
	}
	return vconn.Config{Name: name, Key: creds.Key, Creds: creds, Hubs: hubs, Ports: cfg.Ports, Preferred: cfg.Prefer, PortMap: nf.portMap,
		SSH: cfg.SSH, Logf: logf(nf.verbose, "node", name)}, nil
}

// loadKey loads or creates the key file at path; "" means a fresh key.
func loadKey(path string) (gridlink.Key, error) {
	return gridlink.LoadKey(path)
}

// startOnce starts the node of a one-shot command (cp, a push), which
// needs a hub: it waits for the attachment as long as ctx allows (30 s at
// most if ctx has no deadline).
func startOnce(ctx context.Context, cfg vconn.Config) (*vconn.Node, error) {
	node, err := vconn.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := node.WaitAttached(wctx); err != nil {
		node.Close()
		return nil, err
	}
	return node, nil
}

// keepNode is hold for a vconn node (serve).
func keepNode(ctx context.Context, who string, n *vconn.Node, verbose bool) (context.Context, func() error) {
	ctx, cancel := context.WithCancel(ctx)
	go reportAttach(ctx, who, n, verbose)
	go func() {
		select {
		case <-ctx.Done():
		case <-n.GaveUp():
			cancel()
		}
	}()
	return ctx, func() error {
		cancel()
		select {
		case <-n.GaveUp():
			return fmt.Errorf("%s %s: %w", who, n.Name(), n.Attached())
		default:
			return nil
		}
	}
}

// reportAttach is hold's report for a vconn node.
func reportAttach(ctx context.Context, who string, n *vconn.Node, verbose bool) {
	if verbose {
		return
	}
	last := n.AttachState()
	var lastCause string
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		st, cause := n.AttachState(), ""
		var na *vconn.NotAttachedError
		if err := n.Attached(); errors.As(err, &na) {
			cause = na.Cause.Error()
		}
		switch {
		case st == "" && last != "":
			m := n.Machine()
			fmt.Fprintf(os.Stderr, "%s %s: attached to hub %s\n", who, m.Name, m.HubName)
		case st != "" && (last == "" || cause != lastCause):
			fmt.Fprintf(os.Stderr, "%s %s: %s\n", who, n.Name(), st)
		}
		last, lastCause = st, cause
	}
}

func withDefaultPort(addr string, port int) string { return gridlink.AddrWithPort(addr, port) }
