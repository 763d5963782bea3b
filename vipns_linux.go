package gridlink

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gridlink/gridlink/tun"
)

// The kernel's settings gridlink vip exec depends on, and their files.
const (
	sysMaxUserNS      = "/proc/sys/user/max_user_namespaces"
	sysUnprivUserNS   = "/proc/sys/kernel/unprivileged_userns_clone"             // Debian's and Ubuntu's older kernels
	sysAppArmorUserNS = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns" // Ubuntu 23.10 and later
	tunPath           = "/dev/net/tun"
)

// CheckVIPExec says what this host lacks for gridlink vip exec, as far
// as its settings tell, as a *VIPNamespaceError naming the setting a site
// must change, or nil. VIPExec checks the TUN device first (its mode is
// all that counts) and the user namespace settings only to explain a
// failure: AppArmor's restriction, say, may be lifted for the gridlink
// binary by a profile, which no setting shows.
func CheckVIPExec() error {
	if err := nsSettings(os.Geteuid(), readSysctl); err != nil {
		return err
	}
	return tunAccess(os.Geteuid(), tunPath)
}

// readSysctl is a setting's value, "" if the kernel has no such setting.
func readSysctl(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// nsSettings names the setting that forbids uid user namespaces (read
// by sysctl), or nil.
func nsSettings(uid int, sysctl func(string) string) error {
	if uid == 0 {
		return nil // root needs none of it
	}
	fail := func(missing string, err error) error {
		return &VIPNamespaceError{Step: "check the kernel", Missing: missing, Err: err}
	}
	if sysctl(sysMaxUserNS) == "0" {
		return fail("user.max_user_namespaces is 0: a site must allow user namespaces (sysctl user.max_user_namespaces=15000 or so)", syscall.ENOSPC)
	}
	if sysctl(sysUnprivUserNS) == "0" {
		return fail("kernel.unprivileged_userns_clone is 0: a site must allow users to make user namespaces (sysctl kernel.unprivileged_userns_clone=1)", syscall.EPERM)
	}
	if sysctl(sysAppArmorUserNS) == "1" {
		return fail("AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1): a site must set it to 0 or give the gridlink binary an AppArmor profile that allows userns", syscall.EPERM)
	}
	return nil
}

// tunAccess says why uid cannot use the TUN device at tunPath, or nil.
func tunAccess(uid int, tunPath string) error {
	if uid == 0 {
		return nil
	}
	fail := func(missing string, err error) error {
		return &VIPNamespaceError{Step: "check the kernel", Missing: missing, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Stat(tunPath, &st); err != nil {
		return fail("no "+tunPath+" on this host: a site must load the tun module (modprobe tun) or give the container the device", err)
	}
	if err := unix.Access(tunPath, unix.R_OK|unix.W_OK); err != nil {
		return fail(fmt.Sprintf("%s (mode %#o, owner uid %d) is not readable and writable by uid %d: a site must make it mode 0666, as udev does by default (KERNEL==\"tun\", MODE=\"0666\"); a user can then make TUN devices only in network namespaces of its own",
			tunPath, st.Mode&0o777, st.Uid, uid), err)
	}
	return nil
}

// diagnoseClone explains a failure to start the namespace's process.
func diagnoseClone(err error) error {
	if cerr := nsSettings(os.Geteuid(), readSysctl); cerr != nil {
		return cerr
	}
	e := &VIPNamespaceError{Step: "make a user, network and mount namespace", Err: err}
	errno, _ := errnoOf(err)
	switch errno {
	case syscall.EPERM, syscall.EACCES:
		e.Missing = "the kernel refused a user namespace to this user: a seccomp filter (a container's) or a security module forbids it; a site must allow unshare(CLONE_NEWUSER) to users"
	case syscall.ENOSPC, syscall.EUSERS:
		e.Missing = "the user's (or the host's) limit of user namespaces is reached (user.max_user_namespaces)"
	case syscall.EINVAL:
		e.Missing = "the kernel has no user or network namespaces (CONFIG_USER_NS, CONFIG_NET_NS)"
	}
	return e
}

// diagnoseChild explains a failure inside the namespace: a refusal there
// (the namespace's owner lacking a capability) is most likely a security
// module's (AppArmor's restriction) or the TUN device's mode.
func diagnoseChild(err error) error {
	var e *VIPNamespaceError
	if !errors.As(err, &e) || !(errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)) {
		return err
	}
	if cerr := CheckVIPExec(); cerr != nil {
		var ce *VIPNamespaceError
		errors.As(cerr, &ce)
		e.Missing = ce.Missing
		return e
	}
	e.Missing = "the kernel refused it to the namespace's owner (a security module? a container's seccomp filter?)"
	return e
}

// stepDevice is the namespace's step that makes the TUN device.
const stepDevice = "make the TUN device"

// setupNamespace, in the child, as the namespace's owner: mounts
// private, loopback up, ping allowed to the caller's gid, the TUN device
// with the addresses and routes, and, with a name server, its sockets and
// the namespace's resolv.conf. It returns the descriptors for the agent:
// the device, then the UDP and TCP name sockets.
func setupNamespace(s childSetup) ([]*os.File, error) {
	step := func(name string, err error) error { return &VIPNamespaceError{Step: name, Err: err} }
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, step("make the namespace's mounts private", err)
	}
	if err := loopbackUp(); err != nil {
		return nil, step("set the loopback up", err)
	}
	// ping's ICMP sockets (the setuid or file capability of ping does not
	// count in a user namespace)
	if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", fmt.Appendf(nil, "%d %d\n", s.GID, s.GID), 0); err != nil {
		return nil, step("allow ping (net.ipv4.ping_group_range)", err)
	}
	var addrs []netip.Prefix
	for _, a := range s.Addrs {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return nil, step("read the setup", err)
		}
		addrs = append(addrs, p)
	}
	host, err := tun.Setup(tun.HostConfig{Name: DefaultVIPDevice, MTU: s.MTU, Addrs: addrs})
	if err != nil {
		return nil, step(stepDevice, err)
	}
	dev, err := host.File()
	if err != nil {
		return nil, step(stepDevice, err)
	}
	files := []*os.File{dev}
	if s.NameServer == "" {
		return files, nil
	}
	ns, err := netip.ParseAddrPort(s.NameServer)
	if err != nil {
		return nil, step("read the setup", err)
	}
	pc, err := net.ListenPacket("udp", s.NameServer)
	if err != nil {
		return nil, step("listen for names on "+s.NameServer, err)
	}
	l, err := net.Listen("tcp", s.NameServer)
	if err != nil {
		return nil, step("listen for names on "+s.NameServer, err)
	}
	uf, err := pc.(*net.UDPConn).File()
	if err != nil {
		return nil, step("listen for names", err)
	}
	tf, err := l.(*net.TCPListener).File()
	if err != nil {
		return nil, step("listen for names", err)
	}
	files = append(files, uf, tf)
	if err := mountResolvConf(ns.Addr(), s.Zone); err != nil {
		return nil, step("give the namespace its own /etc/resolv.conf", err)
	}
	return files, nil
}

// mountResolvConf mounts a resolv.conf naming the name server alone over
// /etc/resolv.conf (the namespace cannot reach the host's servers).
func mountResolvConf(ns netip.Addr, zone string) error {
	f, err := os.CreateTemp("", "gridlink-resolv-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // the mount keeps it
	_, err = fmt.Fprintf(f, "# gridlink vip exec: this namespace's names (NODE.%s) through the node's name server\nnameserver %s\n", zone, ns)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err != nil {
		return err
	}
	return unix.Mount(f.Name(), "/etc/resolv.conf", "", unix.MS_BIND, "")
}

// loopbackUp sets the namespace's lo up.
func loopbackUp() error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr)
}

// execWithoutCaps runs the program in place of this process, without the
// capabilities the setup had (ambient ones are per thread: the thread that
// clears them is the one that execs).
func execWithoutCaps(path string, argv []string) {
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "gridlink vip exec: drop capabilities: %v\n", err)
		os.Exit(126)
	}
	err := syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "gridlink vip exec: %s: %v\n", path, err)
	os.Exit(126)
}
