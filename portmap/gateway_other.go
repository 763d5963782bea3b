//go:build !linux

package portmap

import (
	"errors"
	"net/netip"
)

// DefaultGateway is known on Linux only; elsewhere give Config.Gateway.
func DefaultGateway() (netip.Addr, error) {
	return netip.Addr{}, errors.New("finding the default gateway is implemented on Linux only")
}
