//go:build !linux

package direct

import (
	"net"
	"syscall"
	"time"
)

// listenControl leaves listening sockets as they are elsewhere than Linux.
func listenControl(_, _ string, _ syscall.RawConn) error { return nil }

// PeekFirstRecord does not check connections elsewhere than Linux: the
// handshake's timeout bounds them.
func PeekFirstRecord(net.Conn) error { return nil }

// WholeFirstMessage cannot tell elsewhere than Linux: it reports false.
func WholeFirstMessage(net.Conn, string) bool { return false }

// SilentFor cannot tell elsewhere than Linux.
func SilentFor(net.Conn) (time.Duration, bool) { return 0, false }
