// Command gridlink connects every process of a job spread over many sites to
// every other one, whatever firewalls, NATs and non-routed networks stand
// between them, and moves data between them fast and securely.
//
// Its subcommands (hub, node, ping, status, doctor, perf, socks, cp...)
// arrive with the layers they drive; see the README.
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "gridlink",
		Short:         "gridlink connects every pair of processes of a multi-site job",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "print the version of this build",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			v := "(devel)"
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						v = s.Value
					}
				}
			}
			fmt.Println("gridlink", v)
		},
	})
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gridlink:", err)
		os.Exit(1)
	}
}
