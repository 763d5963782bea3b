package cli

// TEMPORARY: hold, identical to the apinode branch's (cli/run.go), for
// serve here. Delete this file when the two branches merge.

import (
	"context"
	"fmt"
	"os"

	"github.com/gridlink/gridlink"
)

// hold is for long-running commands (node, serve, perf --serve): it
// reports the node's attachment (unless -v, whose session log says it)
// and returns a context that ends with ctx or when the hubs refuse the
// node for good, and what to return then: the refusal, or nil.
func hold(ctx context.Context, who string, n *gridlink.Node, verbose bool) (context.Context, func() error) {
	ctx, end := n.Hold(ctx)
	if !verbose {
		go n.WatchAttach(ctx, func(c gridlink.AttachChange) {
			if c.Attached {
				fmt.Fprintf(os.Stderr, "%s %s: attached to hub %s\n", who, c.Machine.Name, c.Machine.HubName)
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
