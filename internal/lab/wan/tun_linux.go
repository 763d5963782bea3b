//go:build linux

package wan

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// offloads are the TUN offloads the emulator asks for with IFF_VNET_HDR:
// checksum offload and TCPv4 segmentation (with ECN). TCPv6 and UDP
// segmentation stay with the kernel, so those packets arrive at wire size.
const offloads = unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO_ECN

// tunDevice is the emulator's queue of one existing TUN device. Reads and
// writes go through the runtime poller, so Close unblocks them.
type tunDevice struct {
	f    *os.File
	vnet bool // packets carry a virtio_net_hdr
}

// openTUN attaches to the existing TUN device dev in the network namespace
// at path netns ("" for the current one). Only the open happens inside the
// namespace: /dev/net/tun binds a file to the namespace it is opened in, so
// the returned device needs no thread of its own afterwards.
func openTUN(netns, dev string, offload bool) (*tunDevice, error) {
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		if netns != "" {
			// Never unlocked: once setns has run, this thread belongs to
			// another namespace, and a goroutine that exits while locked
			// takes its thread with it instead of returning it to the pool.
			runtime.LockOSThread()
		}
		fd, err := attachTUN(netns, dev, offload)
		ch <- result{fd, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, r.err
	}
	f := os.NewFile(uintptr(r.fd), "tun:"+dev)
	if f == nil {
		unix.Close(r.fd)
		return nil, fmt.Errorf("wrap fd %d", r.fd)
	}
	return &tunDevice{f: f, vnet: offload}, nil
}

func attachTUN(netns, dev string, offload bool) (int, error) {
	if netns != "" {
		ns, err := unix.Open(netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("open namespace: %w", err)
		}
		err = unix.Setns(ns, unix.CLONE_NEWNET)
		unix.Close(ns)
		if err != nil {
			return -1, fmt.Errorf("enter namespace: %w", err)
		}
	}
	// TUNSETIFF would quietly create a missing device, which would then
	// vanish on Close; insist on the one the lab builder made.
	if err := checkDeviceExists(dev); err != nil {
		return -1, err
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	if err := configureTUN(fd, dev, offload); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func configureTUN(fd int, dev string, offload bool) error {
	flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if offload {
		flags |= unix.IFF_VNET_HDR
	}
	err := setIff(fd, dev, flags)
	if errors.Is(err, unix.EINVAL) {
		// The kernel insists that the multi-queue flag matches the
		// device's; a device made with "multi_queue" needs it.
		err = setIff(fd, dev, flags|unix.IFF_MULTI_QUEUE)
	}
	switch {
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("attach: %w (another process holds the device)", err)
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("attach: %w (not a TUN device: a TAP or other kind?)", err)
	case err != nil:
		return fmt.Errorf("attach: %w", err)
	}
	if !offload {
		return nil
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnetHdrLen); err != nil {
		return fmt.Errorf("set vnet header size: %w", err)
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, offloads); err != nil {
		return fmt.Errorf("enable offloads: %w", err)
	}
	return nil
}

func setIff(fd int, dev string, flags uint16) error {
	ifr, err := unix.NewIfreq(dev)
	if err != nil {
		return err
	}
	ifr.SetUint16(flags)
	return unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
}

// checkDeviceExists reports whether the calling thread's namespace has a
// network device named dev.
func checkDeviceExists(dev string) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("look up device: %w", err)
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(dev)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFINDEX, ifr); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return errors.New("no such device (the lab builder creates it with ip tuntap add)")
		}
		return fmt.Errorf("look up device: %w", err)
	}
	return nil
}

func (t *tunDevice) Read(b []byte) (int, error)  { return t.f.Read(b) }
func (t *tunDevice) Write(b []byte) (int, error) { return t.f.Write(b) }

// Close detaches from the device. The device itself stays, without the
// offloads the emulator switched on, so a later reader that does not ask
// for virtio headers is not handed GSO batches.
func (t *tunDevice) Close() error {
	if t.vnet {
		if rc, err := t.f.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { unix.IoctlSetInt(int(fd), unix.TUNSETOFFLOAD, 0) })
		}
	}
	return t.f.Close()
}
