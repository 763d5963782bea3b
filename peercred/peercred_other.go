//go:build !linux

package peercred

import "net"

// UID: only Linux tells here; elsewhere every caller is unknown
// (ErrUnsupported), and Admit refuses it.
func UID(net.Conn) (int, error) { return -1, ErrUnsupported }

// Unix: only Linux tells here (ErrUnsupported).
func Unix(net.Conn) (uid, pid int, err error) { return -1, 0, ErrUnsupported }
