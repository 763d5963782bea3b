//go:build !linux

package exec

import (
	"net"
	"os"
	"sync/atomic"
)

// splicedFrames stays 0 (stdin_linux.go's).
var splicedFrames atomic.Int64

// spliceStdin: splice(2) is Linux's; elsewhere the caller copies.
func spliceStdin(in *os.File, c net.Conn, w *frameWriter, cr *credit) bool { return false }
