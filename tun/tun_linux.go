package tun

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
	wgtun "golang.zx2c4.com/wireguard/tun"
)

// vnetHdrLen is the size of struct virtio_net_hdr, which precedes every
// packet on a device opened with IFF_VNET_HDR.
const vnetHdrLen = 10

// Create makes a TUN device named name ("gl%d" lets the kernel number it)
// in the calling thread's network namespace, sets its MTU and switches the
// offloads on. The device is monitored: Events reports it going up or
// down and MTU changes. It lives as long as the Device; addresses, routes
// and link state are the caller's to set.
func Create(name string, mtu int) (Device, error) {
	d, err := wgtun.CreateTUN(name, mtu)
	if err != nil {
		return nil, fmt.Errorf("tun: create %q: %w", name, err)
	}
	return d, nil
}

// AttachError is why Attach could not take an existing device: Reason in
// words, Err the system's error (errors.Is works on it).
type AttachError struct {
	Name   string
	Reason string
	Err    error
}

func (e *AttachError) Error() string {
	return fmt.Sprintf("tun: attach %q: %s: %v", e.Name, e.Reason, e.Err)
}

func (e *AttachError) Unwrap() error { return e.Err }

// Attach opens the existing TUN device name of the calling thread's
// network namespace, with the offloads on if offload is set (batches of up
// to BatchSize packets) or off (one packet per Read). Everything that
// depends on the namespace happens here, so the Device may be used from
// any thread afterwards. It refuses a missing device (NoDeviceError)
// rather than creating one. It reports no Events, and MTU is the MTU at
// attach time. Close detaches, switches the offloads off again (so a later
// reader that asks for no virtio-net headers gets no batches) and leaves
// the device as it was made.
func Attach(name string, offload bool) (Device, error) {
	mtu, err := deviceMTU(name)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &AttachError{Name: name, Reason: "open /dev/net/tun", Err: err}
	}
	if err := configure(fd, name, offload); err != nil {
		unix.Close(fd)
		return nil, err
	}
	d, _, err := wgtun.CreateUnmonitoredTUNFromFD(fd)
	if err != nil {
		unix.Close(fd)
		return nil, &AttachError{Name: name, Reason: "set up offloads", Err: err}
	}
	return &attached{Device: d, mtu: mtu, offload: offload}, nil
}

func configure(fd int, name string, offload bool) error {
	flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if offload {
		flags |= unix.IFF_VNET_HDR
	}
	err := setIff(fd, name, flags)
	if errors.Is(err, unix.EINVAL) {
		// The kernel insists that the multi-queue flag matches the
		// device's; a device made with "multi_queue" needs it.
		err = setIff(fd, name, flags|unix.IFF_MULTI_QUEUE)
	}
	switch {
	case errors.Is(err, unix.EBUSY):
		return &AttachError{Name: name, Reason: "another process holds the device", Err: err}
	case errors.Is(err, unix.EINVAL):
		return &AttachError{Name: name, Reason: "not a TUN device (a TAP or another kind?)", Err: err}
	case err != nil:
		return &AttachError{Name: name, Reason: "TUNSETIFF", Err: err}
	}
	if offload {
		// The header size is the device's, kept from an earlier user.
		if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnetHdrLen); err != nil {
			return &AttachError{Name: name, Reason: "set virtio-net header size", Err: err}
		}
	}
	return nil
}

func setIff(fd int, name string, flags uint16) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	ifr.SetUint16(flags)
	return unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
}

// deviceMTU returns the MTU of the device name in the calling thread's
// namespace, or a NoDeviceError.
func deviceMTU(name string) (int, error) {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, &AttachError{Name: name, Reason: "look up device", Err: err}
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, &AttachError{Name: name, Reason: "device name", Err: err}
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFMTU, ifr); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return 0, &NoDeviceError{Name: name}
		}
		return 0, &AttachError{Name: name, Reason: "look up device", Err: err}
	}
	return int(int32(ifr.Uint32())), nil
}

// attached is a Device Attach opened: its MTU is the one read in the
// device's namespace, and Close switches the offloads off again.
type attached struct {
	wgtun.Device
	mtu     int
	offload bool
}

func (a *attached) MTU() (int, error) { return a.mtu, nil }

func (a *attached) Close() error {
	if a.offload {
		if rc, err := a.Device.File().SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { unix.IoctlSetInt(int(fd), unix.TUNSETOFFLOAD, 0) })
		}
	}
	return a.Device.Close()
}
