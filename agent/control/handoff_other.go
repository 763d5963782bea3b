//go:build !linux

package control

import (
	"net"
	"syscall"
)

func sendEnds(*net.UnixConn, []syscall.Conn) error { return ErrNoHandoff }
