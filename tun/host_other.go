//go:build !linux

package tun

// Host is a TUN device set up on the host (Linux only).
type Host struct{ Device }

// Setup returns ErrUnsupported: TUN devices with offloads are Linux only.
func Setup(cfg HostConfig) (*Host, error) { return nil, ErrUnsupported }
