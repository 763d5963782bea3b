//go:build !linux

package tun

import "os"

// FromFile returns ErrUnsupported: TUN devices with offloads are Linux
// only.
func FromFile(f *os.File, mtu int) (Device, error) {
	f.Close()
	return nil, ErrUnsupported
}

// File returns ErrUnsupported.
func (h *Host) File() (*os.File, error) { return nil, ErrUnsupported }
