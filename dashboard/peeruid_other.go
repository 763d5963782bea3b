//go:build !linux

package dashboard

import "net"

// peerUID is unknown off Linux: the token alone keeps other users out.
func peerUID(net.Conn) (int, bool) { return 0, false }
