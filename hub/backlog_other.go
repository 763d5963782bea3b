//go:build !linux

package hub

import "net"

// setBacklog keeps the system's accept queue elsewhere than Linux.
func setBacklog(net.Listener, int) {}
