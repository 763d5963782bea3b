package direct

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// inNewNetns moves the test's goroutine, locked to its thread, into a new
// network namespace for the rest of the test (the ip commands it runs
// work there) and back when it ends. It needs root.
func inNewNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (CI=true: not skipped)")
		}
		t.Skip("needs root")
	}
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		unix.Close(orig)
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		unix.Close(orig)
	})
	ipCmd(t, "link", "set", "lo", "up")
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
}

// TestLocalPrefixesLeaveOutTunnels: the addresses of a TUN device (a
// VPN's, wireguard-go's, the node's own virtual network device) and of a
// WireGuard device, where the kernel has it, are not this host's
// networks: LocalPrefixes, hence a listener's advertised addresses, leave
// them out; an Ethernet device's (a veth) stays.
func TestLocalPrefixesLeaveOutTunnels(t *testing.T) {
	inNewNetns(t)
	ipCmd(t, "link", "add", "eth9", "type", "veth", "peer", "name", "eth10")
	ipCmd(t, "addr", "add", "10.9.0.1/24", "dev", "eth9")
	ipCmd(t, "link", "set", "eth9", "up")
	ipCmd(t, "link", "set", "eth10", "up")
	ipCmd(t, "tuntap", "add", "dev", "vpn9", "mode", "tun")
	ipCmd(t, "addr", "add", "100.64.9.1/24", "dev", "vpn9")
	ipCmd(t, "link", "set", "vpn9", "up")
	hidden := []netip.Addr{netip.MustParseAddr("100.64.9.1")}
	if exec.Command("ip", "link", "add", "wg9", "type", "wireguard").Run() == nil {
		ipCmd(t, "addr", "add", "100.65.9.1/24", "dev", "wg9")
		ipCmd(t, "link", "set", "wg9", "up")
		hidden = append(hidden, netip.MustParseAddr("100.65.9.1"))
	} else {
		t.Log("no WireGuard in this kernel: TUN device only")
	}
	ps, err := LocalPrefixes()
	if err != nil {
		t.Fatal(err)
	}
	has := func(a netip.Addr) bool {
		return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Addr() == a })
	}
	if !has(netip.MustParseAddr("10.9.0.1")) || !has(netip.MustParseAddr("127.0.0.1")) {
		t.Errorf("LocalPrefixes = %v: the veth's 10.9.0.1 or loopback missing", ps)
	}
	for _, a := range hidden {
		if has(a) {
			t.Errorf("LocalPrefixes = %v: has the tunnel's %s", ps, a)
		}
	}
	addrs := machineAddrs(ps, 7000)
	for _, ap := range addrs {
		if slices.Contains(hidden, ap.Addr()) {
			t.Errorf("advertised %v", addrs)
		}
	}
}

func TestTunnelDevice(t *testing.T) {
	for _, c := range []struct {
		flags net.Flags
		typ   uint16
		want  bool
	}{
		{net.FlagUp | net.FlagBroadcast, 1, false},           // Ethernet
		{net.FlagUp | net.FlagLoopback, 772, false},          // loopback
		{net.FlagUp | net.FlagPointToPoint, 65534, true},     // TUN, WireGuard
		{net.FlagUp | net.FlagPointToPoint, 0, true},         // the flag alone
		{net.FlagUp, arphrdNone, true},                       // a TUN without the flag
		{net.FlagUp, arphrdIPGRE, true},                      // GRE
		{net.FlagUp | net.FlagPointToPoint, arphrdPPP, true}, // PPP
	} {
		if got := tunnelDevice(c.flags, c.typ); got != c.want {
			t.Errorf("tunnelDevice(%v, %d) = %v, want %v", c.flags, c.typ, got, c.want)
		}
	}
}
