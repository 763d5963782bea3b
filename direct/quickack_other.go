//go:build !linux

package direct

import "net"

func quickAck(c net.Conn) net.Conn { return c }
