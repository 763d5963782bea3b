package tun

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
	wgtun "golang.zx2c4.com/wireguard/tun"
)

// FromFile takes the descriptor of a TUN device that another process
// made (gridlink vip exec hands the node agent one made in a network
// namespace of its own) and wraps it as a Device. It first checks that f
// is one: an open file of /dev/net/tun (character device 10:200) with a
// TUN interface attached, in IFF_TUN mode without packet information
// (IFF_NO_PI); anything else is a *NotTUNError. The offloads are as the
// maker chose (on with IFF_VNET_HDR, as Create makes it). mtu is the MTU
// the maker set: the device's namespace need not be this process's, where
// its name means nothing, so MTU reports this number. Name asks the
// descriptor. No Events are sent. FromFile takes f (closed on failure
// too); Close closes the descriptor.
func FromFile(f *os.File, mtu int) (Device, error) {
	defer f.Close()
	if mtu <= 0 || mtu > MaxPacket {
		return nil, notTUN("MTU %d out of range 1-%d", mtu, MaxPacket)
	}
	fd := int(f.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, notTUN("fstat: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != tunMajor || unix.Minor(st.Rdev) != tunMinor {
		return nil, notTUN("not /dev/net/tun (mode %#o, device %d:%d)", st.Mode&unix.S_IFMT, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return nil, notTUN("%v", err)
	}
	if err := unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr); err != nil {
		return nil, notTUN("no interface attached to it (TUNGETIFF: %v)", err)
	}
	flags := ifr.Uint16()
	switch {
	case flags&unix.IFF_TAP != 0:
		return nil, notTUN("%s is a TAP device", ifr.Name())
	case flags&unix.IFF_TUN == 0:
		return nil, notTUN("%s is not in TUN mode (flags %#x)", ifr.Name(), flags)
	case flags&unix.IFF_NO_PI == 0:
		return nil, notTUN("%s carries packet information (no IFF_NO_PI)", ifr.Name())
	}
	dup, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("tun: duplicate the handed descriptor: %w", err)
	}
	d, _, err := wgtun.CreateUnmonitoredTUNFromFD(dup)
	if err != nil {
		unix.Close(dup)
		return nil, fmt.Errorf("tun: take the handed device: %w", err)
	}
	return &attached{Device: d, mtu: mtu}, nil
}

// File is a duplicate of the device's descriptor (close-on-exec), to hand
// to another process (FromFile there): the device lives as long as any
// descriptor of it is open.
func (h *Host) File() (*os.File, error) {
	fd, ok := h.Device.(interface{ File() *os.File })
	if !ok {
		return nil, fmt.Errorf("tun: device %s has no descriptor", h.name)
	}
	dup, err := unix.FcntlInt(fd.File().Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("tun: device %s: duplicate its descriptor: %w", h.name, err)
	}
	return os.NewFile(uintptr(dup), "/dev/net/tun "+h.name), nil
}
