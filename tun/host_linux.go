package tun

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// addrGenModeNone is IN6_ADDR_GEN_MODE_NONE (linux/if_link.h).
const addrGenModeNone = 1

// Host is a TUN device Setup put on the host: created, its addresses on
// it, a route through it for each of their prefixes, its link up. It is
// the Device (Read, Write, ...); Close takes the routes and addresses off
// again and closes the device, which the kernel then removes.
type Host struct {
	Device
	name   string
	handle *netlink.Handle
	link   netlink.Link
	addrs  []*netlink.Addr
	routes []*netlink.Route
	once   sync.Once
	err    error
}

// Setup makes the TUN device of cfg in the calling thread's network
// namespace (Create: offloads on), puts cfg.Addrs on it, routes their
// prefixes through it and sets its link up, all with rtnetlink
// (github.com/vishvananda/netlink). A prefix the host routes already is a
// *RouteTakenError; every failure is a *SetupError naming the step, and
// undoes the steps before it.
func Setup(cfg HostConfig) (*Host, error) {
	cfg, err := cfg.check()
	if err != nil {
		return nil, err
	}
	fail := func(step string, err error) error { return &SetupError{Device: cfg.Name, Step: step, Err: err} }
	if _, err := os.Stat("/dev/net/tun"); errors.Is(err, os.ErrNotExist) {
		return nil, fail("open /dev/net/tun", ErrNoTUNDevice)
	}
	handle, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fail("open rtnetlink", err)
	}
	h := &Host{name: cfg.Name, handle: handle}
	for _, a := range cfg.Addrs {
		if err := h.checkRoute(a.Masked()); err != nil {
			handle.Delete()
			return nil, fail("route "+a.Masked().String(), err)
		}
	}
	dev, err := Create(cfg.Name, cfg.MTU)
	if err != nil {
		handle.Delete()
		step := "create the device"
		if errors.Is(err, unix.EBUSY) {
			step += " (a device of this name exists and is in use: another node's? choose another name)"
		}
		return nil, fail(step, errors.Unwrap(err))
	}
	h.Device = dev
	if h.link, err = handle.LinkByName(cfg.Name); err != nil {
		h.Close()
		return nil, fail("find the device", err)
	}
	// no IPv6 link-local address: the kernel would send router
	// solicitations and multicast listener reports from it into the device,
	// which no peer takes
	if err := handle.LinkSetIP6AddrGenMode(h.link, addrGenModeNone); err != nil {
		h.Close()
		return nil, fail("turn off IPv6 link-local addressing", err)
	}
	if err := enableIPv6(cfg.Name); err != nil {
		h.Close()
		return nil, fail("enable IPv6 on the device", err)
	}
	for _, a := range cfg.Addrs {
		na := &netlink.Addr{IPNet: ipNet(a), Flags: unix.IFA_F_NOPREFIXROUTE}
		if a.Addr().Is6() {
			na.Flags |= unix.IFA_F_NODAD // a TUN device has no neighbours to ask
		}
		if err := handle.AddrAdd(h.link, na); err != nil {
			h.Close()
			return nil, fail("add address "+a.String(), err)
		}
		h.addrs = append(h.addrs, na)
	}
	if err := handle.LinkSetUp(h.link); err != nil {
		h.Close()
		return nil, fail("set the link up", err)
	}
	for _, a := range cfg.Addrs {
		r := &netlink.Route{LinkIndex: h.link.Attrs().Index, Dst: ipNet(a.Masked()), Src: a.Addr().AsSlice(), Scope: netlink.SCOPE_LINK}
		if err := handle.RouteAdd(r); err != nil {
			h.Close()
			return nil, fail("route "+a.Masked().String(), err)
		}
		h.routes = append(h.routes, r)
	}
	return h, nil
}

// enableIPv6 switches IPv6 on for the device name alone (its
// disable_ipv6 sysctl in the calling thread's network namespace): a host
// (or a lab namespace) that disables IPv6 by default
// (net.ipv6.conf.default.disable_ipv6=1) makes new devices without it,
// and the kernel refuses their IPv6 addresses. A kernel without IPv6
// (ipv6.disable=1) is ErrNoIPv6.
func enableIPv6(name string) error {
	path := "/proc/sys/net/ipv6/conf/" + name + "/disable_ipv6"
	if _, err := os.Stat("/proc/sys/net/ipv6"); errors.Is(err, os.ErrNotExist) {
		return ErrNoIPv6
	}
	return os.WriteFile(path, []byte("0\n"), 0)
}

// checkRoute refuses a prefix the host routes already.
func (h *Host) checkRoute(p netip.Prefix) error {
	family := netlink.FAMILY_V4
	if p.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	rs, err := h.handle.RouteListFiltered(family, &netlink.Route{Dst: ipNet(p)}, netlink.RT_FILTER_DST)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if r.Dst == nil || r.Dst.String() != p.String() {
			continue
		}
		e := &RouteTakenError{Prefix: p}
		if l, err := h.handle.LinkByIndex(r.LinkIndex); err == nil {
			e.Device = l.Attrs().Name
		}
		return e
	}
	return nil
}

// Name is the device's name.
func (h *Host) Name() (string, error) { return h.name, nil }

// Close takes the routes and addresses Setup put on the host off again
// and closes the device. It may be called more than once.
func (h *Host) Close() error {
	h.once.Do(func() {
		var errs []error
		for _, r := range h.routes {
			if err := h.handle.RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENODEV) {
				errs = append(errs, fmt.Errorf("tun: device %s: remove route %s: %w", h.name, r.Dst, err))
			}
		}
		for _, a := range h.addrs {
			if err := h.handle.AddrDel(h.link, a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) && !errors.Is(err, unix.ENODEV) {
				errs = append(errs, fmt.Errorf("tun: device %s: remove address %s: %w", h.name, a.IPNet, err))
			}
		}
		if h.Device != nil {
			errs = append(errs, h.Device.Close())
		}
		h.handle.Delete()
		h.err = errors.Join(errs...)
	})
	return h.err
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
