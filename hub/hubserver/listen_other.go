//go:build !linux

package hubserver

import (
	"net"
	"time"
)

// tuneListener leaves the listening socket as the system makes it
// elsewhere than Linux.
func tuneListener(net.Listener, int, time.Duration) {}
