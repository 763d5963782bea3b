//go:build unix

package cli

import (
	"os"
	"syscall"
)

// winch is the signal of a terminal's size change, forwarded to a remote
// pty.
var winch os.Signal = syscall.SIGWINCH
