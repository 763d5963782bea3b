//go:build !linux

package nat

import "syscall"

// reuseControl: address reuse is set up on Linux only; elsewhere a splice
// socket binds its port alone.
func reuseControl(network, address string, c syscall.RawConn) error { return nil }
