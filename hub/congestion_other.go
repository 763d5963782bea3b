//go:build !linux

package hub

import (
	"errors"
	"net"
)

// SetCongestion sets a connection's TCP congestion control: Linux only.
func SetCongestion(c net.Conn, algo string) error {
	return errors.New("TCP_CONGESTION is Linux only")
}

// Congestion is the TCP congestion control c runs: unknown here.
func Congestion(c net.Conn) string { return "" }
