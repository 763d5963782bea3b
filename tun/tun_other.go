//go:build !linux

package tun

// Create returns ErrUnsupported: TUN devices with offloads are Linux only.
func Create(name string, mtu int) (Device, error) { return nil, ErrUnsupported }

// Attach returns ErrUnsupported: TUN devices with offloads are Linux only.
func Attach(name string, offload bool) (Device, error) { return nil, ErrUnsupported }
