package tun

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openTUN opens /dev/net/tun and, unless flags is 0, attaches an
// interface of that kind (TUNSETIFF) named name.
func openTUN(t *testing.T, name string, flags uint16) *os.File {
	t.Helper()
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if flags != 0 {
		ifr, _ := unix.NewIfreq(name)
		ifr.SetUint16(flags)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			t.Fatalf("TUNSETIFF %s: %v", name, err)
		}
	}
	return os.NewFile(uintptr(fd), name)
}

// FromFile takes only TUN devices without packet information: a pipe, a
// regular file, /dev/null, /dev/net/tun without an interface, a TAP
// device are refused with a NotTUNError (a process of the agent's uid could otherwise hand it any
// descriptor).
func TestFromFileRefuses(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	reg, err := os.CreateTemp(t.TempDir(), "reg")
	if err != nil {
		t.Fatal(err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]*os.File{"pipe": r, "regular file": reg, "/dev/null": null}
	check := func(what string, f *os.File) {
		d, err := FromFile(f, 1500)
		var nt *NotTUNError
		if !errors.As(err, &nt) {
			if d != nil {
				d.Close()
			}
			t.Errorf("%s: %v, want a NotTUNError", what, err)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
	for what, f := range cases {
		check(what, f)
	}
	if os.Geteuid() != 0 {
		return
	}
	inNewNetns(t)
	check("/dev/net/tun without an interface", openTUN(t, "", 0))
	check("a TAP device", openTUN(t, "gltap0", unix.IFF_TAP|unix.IFF_NO_PI))
	// (a TUN device with packet information is refused too; this
	// host's kernel, 6.18, reports IFF_NO_PI for every TUN device, so
	// it cannot be made here)
}

// A device Setup made, handed on as its File, is taken by FromFile: its
// name and the MTU given, and the packets routed into it are read there.
func TestFromFileTakesHostDevice(t *testing.T) {
	inNewNetns(t)
	h, err := Setup(HostConfig{Name: "glhand0", MTU: 9000, Addrs: []netip.Prefix{netip.MustParsePrefix("100.96.0.5/12")}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	f, err := h.File()
	if err != nil {
		t.Fatal(err)
	}
	d, err := FromFile(f, 9000)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if name, err := d.Name(); err != nil || name != "glhand0" {
		t.Errorf("Name: %q, %v", name, err)
	}
	if mtu, _ := d.MTU(); mtu != 9000 {
		t.Errorf("MTU %d, want 9000", mtu)
	}
	c, err := net.Dial("udp", "100.96.0.9:9")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("through the handed device")); err != nil {
		t.Fatal(err)
	}
	bufs := make([][]byte, d.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, Offset+MaxPacket)
	}
	sizes := make([]int, len(bufs))
	got := make(chan netip.Addr, 1)
	go func() {
		for {
			n, err := d.Read(bufs, sizes, Offset)
			if err != nil {
				return
			}
			for i := range n {
				p := bufs[i][Offset : Offset+sizes[i]]
				if len(p) >= 20 && p[0]>>4 == 4 {
					got <- netip.AddrFrom4([4]byte(p[16:20]))
					return
				}
			}
		}
	}()
	select {
	case dst := <-got:
		if dst != netip.MustParseAddr("100.96.0.9") {
			t.Errorf("read a packet to %s", dst)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no packet read from the handed device")
	}
}
