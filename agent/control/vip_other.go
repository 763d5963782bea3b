//go:build !linux

package control

import (
	"net"
	"os"
)

// sendFiles: only Linux agents take devices.
func sendFiles(uc *net.UnixConn, msg []byte, files []*os.File) error { return ErrNoHandoff }
