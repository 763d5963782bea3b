//go:build !linux

package control

import (
	"errors"
	"net"
)

// PeerCred: only Linux tells a unix socket's peer here; elsewhere every
// caller is refused as unknown.
func PeerCred(c net.Conn) (uid, pid int, err error) {
	return -1, 0, errors.New("peer credentials are not supported on this system")
}
