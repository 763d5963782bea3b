package cli

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/gridlink/gridlink"
)

// vipCmd is gridlink vip: the virtual IP network without root.
func vipCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "vip",
		Short: "the grid's virtual IP network without root (gridlink vip exec)",
	}
	var control string
	var noNames bool
	ex := &cobra.Command{
		Use:   "exec [--] CMD [ARGS...]",
		Short: "run CMD in a namespace of its own that holds this node's virtual addresses",
		Long: `exec runs CMD in a user, network and mount namespace of its own, without
root: a TUN device there holds this node's virtual addresses (claimed by
your agent, gridlink node, started as you with --hub), the virtual
prefixes are routed through it, and your agent carries its packets over
the overlay while CMD runs. NODE.grid names resolve inside (the
namespace's own /etc/resolv.conf names the node's name server there);
other names and addresses outside the virtual network are unreachable
from inside. CMD runs as you, without capabilities; its exit status is
exec's. One exec at a time per agent. It needs unprivileged user
namespaces and /dev/net/tun readable and writable by users (docs/vip.md,
"Without root").`,
		Example: `  gridlink vip exec -- ping -c1 n2.grid
  gridlink vip exec -- mpirun --hostfile hosts.grid ./solver`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			code, err := gridlink.VIPExec(context.Background(), gridlink.VIPExecConfig{Control: control, Argv: args, NoNames: noNames})
			if err != nil {
				return err
			}
			os.Exit(code)
			return nil
		},
	}
	ex.Flags().SetInterspersed(false)
	ex.Flags().StringVar(&control, "control", "", "the agent's control socket (default: yours, then the system's)")
	ex.Flags().BoolVar(&noNames, "no-names", false, "no name server and no resolv.conf of the namespace's own")
	c.AddCommand(ex)
	return c
}
