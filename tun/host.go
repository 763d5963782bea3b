package tun

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
)

// DefaultName is the name of the device Setup makes when HostConfig.Name
// is empty.
const DefaultName = "gridlink0"

// HostConfig is what Setup puts on the host: a new TUN device, the
// node's addresses on it and a route through it for each of their
// prefixes.
type HostConfig struct {
	// Name is the device's name; empty: DefaultName.
	Name string
	// MTU is the device's MTU (required).
	MTU int
	// Addrs are the node's addresses, each with the length of the
	// virtual network's prefix (100.97.3.4/12, fd67:726c::1:2/32): the
	// address goes on the device, the prefix (masked) is routed through
	// it.
	Addrs []netip.Prefix
}

// ErrNoTUNDevice: this host (or container) has no /dev/net/tun.
var ErrNoTUNDevice = errors.New("no /dev/net/tun on this host (load the tun module, or give the container the device)")

// ErrNoIPv6: the kernel runs without IPv6 (booted with ipv6.disable=1),
// so the device cannot hold the node's IPv6 address.
var ErrNoIPv6 = errors.New("this kernel runs without IPv6 (ipv6.disable=1)")

// SetupError is why Setup could not put the device on the host: the
// device, the step that failed in words ("create the device", "add
// address 100.97.3.4/12", "route fd67:726c::/32", "set the link up") and
// the system's error (errors.Is works on it: syscall.EPERM when the
// process lacks CAP_NET_ADMIN, ErrNoTUNDevice, ErrNoIPv6, ...).
type SetupError struct {
	Device string
	Step   string
	Err    error
}

func (e *SetupError) Error() string {
	s := fmt.Sprintf("tun: device %s: %s: %v", e.Device, e.Step, e.Err)
	if errors.Is(e.Err, syscall.EPERM) {
		s += " (needs root or CAP_NET_ADMIN; without them, `gridlink vip exec -- CMD` runs CMD on the virtual network in a namespace of its own)"
	}
	return s
}

func (e *SetupError) Unwrap() error { return e.Err }

// RouteTakenError is a prefix Setup would route through the device that
// the host already routes elsewhere (another device, or a second node
// with the same prefix in this network namespace): Setup leaves the
// host's route alone and fails.
type RouteTakenError struct {
	Prefix netip.Prefix
	Device string // the device that has it, when known
}

func (e *RouteTakenError) Error() string {
	if e.Device != "" {
		return fmt.Sprintf("the host already routes %s through %s", e.Prefix, e.Device)
	}
	return fmt.Sprintf("the host already routes %s", e.Prefix)
}

func (c HostConfig) check() (HostConfig, error) {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.MTU <= 0 || c.MTU > MaxPacket {
		return c, &SetupError{Device: c.Name, Step: "check the configuration", Err: fmt.Errorf("MTU %d out of range 1-%d", c.MTU, MaxPacket)}
	}
	if len(c.Addrs) == 0 {
		return c, &SetupError{Device: c.Name, Step: "check the configuration", Err: errors.New("no addresses")}
	}
	for _, a := range c.Addrs {
		if !a.IsValid() || a.Addr().Is4In6() || a.Addr() == a.Masked().Addr() {
			return c, &SetupError{Device: c.Name, Step: "check the configuration", Err: fmt.Errorf("address %s is not a host address in its prefix", a)}
		}
	}
	return c, nil
}
