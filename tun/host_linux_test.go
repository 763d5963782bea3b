package tun

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var hostAddrs = []netip.Prefix{netip.MustParsePrefix("100.97.3.4/12"), netip.MustParsePrefix("fd67:726c::1:2/32")}

func ipOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestSetup puts a device on the host: both addresses on it, both
// prefixes routed through it from the node's address, the link up, the
// MTU set; a datagram sent into the prefix comes out of the device from
// the node's address; Close takes it all away.
func TestSetup(t *testing.T) {
	inNewNetns(t)
	h, err := Setup(HostConfig{Name: "gltest0", MTU: 9000, Addrs: hostAddrs})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	show := ipOut(t, "addr", "show", "dev", "gltest0")
	for _, want := range []string{"100.97.3.4/12", "fd67:726c::1:2/32", "mtu 9000", "UP"} {
		if !strings.Contains(show, want) {
			t.Errorf("ip addr show lacks %q:\n%s", want, show)
		}
	}
	if strings.Contains(show, "fe80:") {
		t.Errorf("the device has an IPv6 link-local address (the kernel's solicitations would go into the device):\n%s", show)
	}
	for dst, src := range map[string]string{"100.100.1.1": "100.97.3.4", "fd67:726c::9": "fd67:726c::1:2"} {
		got := ipOut(t, "route", "get", dst)
		if !strings.Contains(got, "dev gltest0") || !strings.Contains(got, "src "+src) {
			t.Errorf("ip route get %s = %q, want dev gltest0 src %s", dst, got, src)
		}
	}

	c, err := net.Dial("udp4", "100.100.1.1:9")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bufs := [][]byte{make([]byte, Offset+MaxPacket)}
	sizes := make([]int, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 50; i++ {
			c.Write([]byte("hello"))
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	for {
		n, err := h.Read(bufs, sizes, Offset)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			continue
		}
		pkt := bufs[0][Offset : Offset+sizes[0]]
		if pkt[0]>>4 != 4 || pkt[9] != unix.IPPROTO_UDP {
			continue // the kernel's own (IPv6 router solicitations, ...)
		}
		if src := netip.AddrFrom4([4]byte(pkt[12:16])); src.String() != "100.97.3.4" {
			t.Fatalf("datagram from %s, want the node's address", src)
		}
		break
	}
	done <- struct{}{}

	if err := h.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if out, err := exec.Command("ip", "link", "show", "gltest0").CombinedOutput(); err == nil {
		t.Fatalf("device still there after Close:\n%s", out)
	}
	if got := ipOut(t, "route", "show", "100.96.0.0/12"); strings.TrimSpace(got) != "" {
		t.Fatalf("route still there after Close: %q", got)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestSetupRouteTaken: a prefix the host routes elsewhere is refused,
// naming the device that has it, and nothing is left behind.
func TestSetupRouteTaken(t *testing.T) {
	inNewNetns(t)
	ip(t, "tuntap", "add", "other0", "mode", "tun")
	ip(t, "link", "set", "other0", "up")
	ip(t, "route", "add", "100.96.0.0/12", "dev", "other0")
	_, err := Setup(HostConfig{Name: "gltest1", MTU: 1420, Addrs: hostAddrs})
	var rt *RouteTakenError
	var se *SetupError
	if !errors.As(err, &rt) || !errors.As(err, &se) || rt.Device != "other0" || rt.Prefix.String() != "100.96.0.0/12" {
		t.Fatalf("Setup = %v, want a SetupError of a RouteTakenError naming other0", err)
	}
	if !strings.Contains(err.Error(), "already routes 100.96.0.0/12 through other0") {
		t.Errorf("error %q does not say which route", err)
	}
	if out, err := exec.Command("ip", "link", "show", "gltest1").CombinedOutput(); err == nil {
		t.Fatalf("device made anyway:\n%s", out)
	}
}

// TestSetupTwice: a second device of the same name in the namespace is
// refused (the first node's routes and device stay).
func TestSetupTwice(t *testing.T) {
	inNewNetns(t)
	h, err := Setup(HostConfig{Name: "gltest2", MTU: 1420, Addrs: hostAddrs})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_, err = Setup(HostConfig{Name: "gltest2", MTU: 1420, Addrs: hostAddrs})
	var rt *RouteTakenError
	if !errors.As(err, &rt) || rt.Device != "gltest2" {
		t.Fatalf("second Setup = %v, want the route taken by gltest2", err)
	}
	if got := ipOut(t, "route", "get", "100.100.1.1"); !strings.Contains(got, "dev gltest2") {
		t.Fatalf("first device's route gone: %q", got)
	}
}

// TestSetupErrorWords: a refusal for want of privilege says what is
// needed; errors.Is finds the system's error.
func TestSetupErrorWords(t *testing.T) {
	err := error(&SetupError{Device: "gridlink0", Step: "create the device", Err: unix.EPERM})
	if !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), "needs root or CAP_NET_ADMIN") || !strings.Contains(err.Error(), "gridlink vip exec") {
		t.Fatalf("%v", err)
	}
	err = &SetupError{Device: "gridlink0", Step: "open /dev/net/tun", Err: ErrNoTUNDevice}
	if !errors.Is(err, ErrNoTUNDevice) || strings.Contains(err.Error(), "CAP_NET_ADMIN") {
		t.Fatalf("%v", err)
	}
	for _, c := range []HostConfig{{MTU: 0, Addrs: hostAddrs}, {MTU: 70000, Addrs: hostAddrs}, {MTU: 1420},
		{MTU: 1420, Addrs: []netip.Prefix{netip.MustParsePrefix("100.96.0.0/12")}}} {
		if _, err := c.check(); !errors.As(err, new(*SetupError)) {
			t.Errorf("check(%+v) = %v, want a SetupError", c, err)
		}
	}
}

// A namespace that disables IPv6 by default (as the lab's do) still gets
// the node's IPv6 address and route: the device alone has IPv6 on.
func TestSetupIPv6DisabledByDefault(t *testing.T) {
	inNewNetns(t)
	for _, k := range []string{"all", "default"} {
		if out, err := exec.Command("sysctl", "-w", "net.ipv6.conf."+k+".disable_ipv6=1").CombinedOutput(); err != nil {
			t.Fatalf("sysctl: %v\n%s", err, out)
		}
	}
	h, err := Setup(HostConfig{Name: "gltest3", MTU: 1420, Addrs: hostAddrs})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if got := ipOut(t, "route", "get", "fd67:726c::9"); !strings.Contains(got, "dev gltest3") || !strings.Contains(got, "src fd67:726c::1:2") {
		t.Fatalf("ip route get fd67:726c::9 = %q", got)
	}
	if show := ipOut(t, "addr", "show", "dev", "gltest3"); !strings.Contains(show, "fd67:726c::1:2/32") || strings.Contains(show, "fe80:") {
		t.Fatalf("addresses:\n%s", show)
	}
}
