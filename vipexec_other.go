//go:build !linux

package gridlink

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// VIPExecConfig is what VIPExec runs (Linux only).
type VIPExecConfig struct {
	Control string
	Argv    []string
	NoNames bool
}

// VIPChildArg is the re-executed binary's first argument (Linux only).
const VIPChildArg = "__gridlink-vip-namespace"

var errVIPExecLinux = errors.New("gridlink vip exec needs Linux (user and network namespaces)")

// VIPExec needs Linux.
func VIPExec(ctx context.Context, cfg VIPExecConfig) (int, error) { return 0, errVIPExecLinux }

// CheckVIPExec needs Linux.
func CheckVIPExec() error { return errVIPExecLinux }

// VIPNamespaceChild needs Linux.
func VIPNamespaceChild(args []string) {
	fmt.Fprintln(os.Stderr, errVIPExecLinux)
	os.Exit(126)
}
