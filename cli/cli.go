// Package cli defines the gridlink command line: the cobra command tree,
// which parses flags, calls the product API (package gridlink) or the node
// agent's client, and prints. It owns flag parsing, defaults, output
// formats, exit codes and passphrase prompts, nothing else; its imports
// are held to that by internal/archtest (cliAllowed).
package cli

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/status"
)

// Root returns the gridlink command.
func Root() *cobra.Command {
	root := &cobra.Command{
		Use:           "gridlink",
		Short:         "gridlink connects every pair of processes of a multi-site job",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(versionCmd(), hubCmd(), nodeCmd(), pingCmd(), statusCmd(), doctorCmd(), perfCmd(),
		socksCmd(), exposeCmd(), forwardCmd(), ncCmd(), execCmd(), submitCmd(), jobsCmd(), serveCmd(), cpCmd(), caCmd(), certCmd(), proxyCmd(), vipCmd(), dashboardCmd())
	addLogFormat(root)
	return root
}

// Main runs the command line and exits.
func Main() {
	if len(os.Args) > 1 && os.Args[1] == gridlink.VIPChildArg {
		gridlink.VIPNamespaceChild(os.Args[2:]) // gridlink vip exec's namespace
	}
	if filepath.Base(os.Args[0]) == ExecName {
		// a launcher's one-program ssh (MPICH's -launcher-exec)
		os.Exit(runExec(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	if err := Root().Execute(); err != nil {
		// an error may carry another machine's words: its lines keep
		// their breaks, their control characters are escaped.
		lines := strings.Split(err.Error(), "\n")
		for i := range lines {
			lines[i] = status.PrintableLine(lines[i])
		}
		fmt.Fprintln(os.Stderr, "gridlink:", strings.Join(lines, "\n"))
		os.Exit(1)
	}
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
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
	}
}

func parsePorts(s string) (gridlink.PortRange, error) {
	if s == "" {
		return gridlink.PortRange{}, nil
	}
	lo, hi, ok := strings.Cut(s, "-")
	if !ok {
		hi = lo
	}
	l, err1 := strconv.ParseUint(lo, 10, 16)
	h, err2 := strconv.ParseUint(hi, 10, 16)
	if err1 != nil || err2 != nil || l == 0 || h < l {
		return gridlink.PortRange{}, fmt.Errorf("--ports %q: want LO-HI, e.g. 40000-40100", s)
	}
	return gridlink.PortRange{Lo: uint16(l), Hi: uint16(h)}, nil
}

// parsePrefixes parses the values of a repeatable prefix flag.
func parsePrefixes(flag string, ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%s %q: want a network like 10.2.0.0/16", flag, s)
		}
		out = append(out, p)
	}
	return out, nil
}

func sshConfig(use bool, cfgFile, known string, ids []string) *gridlink.SSHConfig {
	if !use && cfgFile == "" && known == "" && len(ids) == 0 {
		return nil
	}
	return &gridlink.SSHConfig{ConfigFile: cfgFile, KnownHosts: known, IdentityFiles: ids}
}
