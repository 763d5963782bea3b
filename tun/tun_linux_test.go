package tun

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	wgtun "golang.zx2c4.com/wireguard/tun"
)

// The library's device is a Device.
var _ Device = wgtun.Device(nil)

// inNewNetns moves the test's goroutine, locked to its thread, into a new
// network namespace for the rest of the test (sockets, devices and the ip
// commands it runs are made there) and back when it ends. It needs root.
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
		// A thread that cannot go back stays locked and dies with the
		// goroutine rather than returning to the pool in the wrong
		// namespace.
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		unix.Close(orig)
	})
	ip(t, "link", "set", "lo", "up")
}

func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
}

var (
	local  = netip.MustParseAddr("198.51.100.1")
	remote = netip.MustParseAddr("198.51.100.2")
)

// udpPacket builds an IPv4 UDP packet with correct checksums.
func udpPacket(src, dst netip.AddrPort, payload []byte) []byte {
	pkt := make([]byte, 28+len(payload))
	be := binary.BigEndian
	pkt[0] = 0x45
	be.PutUint16(pkt[2:], uint16(len(pkt)))
	pkt[8] = 64
	pkt[9] = unix.IPPROTO_UDP
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(pkt[12:], s[:])
	copy(pkt[16:], d[:])
	be.PutUint16(pkt[10:], ^sum(pkt[:20], 0))
	u := pkt[20:]
	be.PutUint16(u[0:], src.Port())
	be.PutUint16(u[2:], dst.Port())
	be.PutUint16(u[4:], uint16(len(u)))
	copy(u[8:], payload)
	c := ^sum(u, uint32(sum(pkt[12:20], uint32(unix.IPPROTO_UDP)+uint32(len(u)))))
	if c == 0 {
		c = 0xffff
	}
	be.PutUint16(u[6:], c)
	return pkt
}

func sum(b []byte, initial uint32) uint16 {
	s := uint64(initial)
	for ; len(b) >= 2; b = b[2:] {
		s += uint64(binary.BigEndian.Uint16(b))
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// TestCreateOffloads makes a TUN device with Create and checks both
// offloads with the kernel's own traffic: a UDP send of three segments
// (UDP_SEGMENT) reaches Read as three wire-sized packets, and three
// datagrams handed to one Write (coalesced by GRO where the kernel takes
// UDP offloads) reach a socket as three datagrams.
func TestCreateOffloads(t *testing.T) {
	inNewNetns(t)
	d, err := Create("gltun0", 1500)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if name, err := d.Name(); name != "gltun0" || err != nil {
		t.Fatalf("Name = %q, %v", name, err)
	}
	if mtu, err := d.MTU(); mtu != 1500 || err != nil {
		t.Fatalf("MTU = %d, %v", mtu, err)
	}
	if d.BatchSize() < 2 {
		t.Fatalf("BatchSize %d: offloads are off", d.BatchSize())
	}
	ip(t, "addr", "add", local.String()+"/24", "dev", "gltun0")
	ip(t, "link", "set", "gltun0", "up")
	select {
	case ev := <-d.Events():
		if ev != EventUp {
			t.Fatalf("first event %v, want EventUp", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no EventUp within 10 s of the link going up")
	}

	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const seg = 100
	payload := make([]byte, 3*seg)
	for i := range payload {
		payload[i] = byte(i / seg)
	}
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafeCmsg(oob))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], seg)
	to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(remote, 9))
	if _, _, err := conn.WriteMsgUDP(payload, oob, to); err != nil {
		t.Fatal(err)
	}
	bufs := make([][]byte, d.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, Offset+MaxPacket)
	}
	sizes := make([]int, len(bufs))
	var got [][]byte
	reads := 0
	for len(got) < 3 {
		n, err := d.Read(bufs, sizes, Offset)
		if err != nil {
			t.Fatal(err)
		}
		reads++
		for i := range n {
			pkt := bufs[i][Offset : Offset+sizes[i]]
			if pkt[0]>>4 == 4 && pkt[9] == unix.IPPROTO_UDP && netip.AddrFrom4([4]byte(pkt[16:20])) == remote {
				got = append(got, append([]byte(nil), pkt...))
			}
		}
	}
	t.Logf("3 segments in %d reads", reads)
	for i, pkt := range got {
		if len(pkt) != 28+seg || !bytes.Equal(pkt[28:], payload[i*seg:(i+1)*seg]) {
			t.Errorf("segment %d: %d bytes, payload %x..., want %d bytes of %x", i, len(pkt), pkt[28:29], 28+seg, i)
		}
		if sum(pkt[:20], 0) != 0xffff {
			t.Errorf("segment %d: bad IP checksum", i)
		}
	}

	from := netip.AddrPortFrom(remote, 7000)
	dst := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	out := make([][]byte, 3)
	for i := range out {
		b := make([]byte, Offset, Offset+MaxPacket)
		out[i] = append(b, udpPacket(from, dst, payload[i*seg:(i+1)*seg])...)
	}
	if _, err := d.Write(out, Offset); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2000)
	for i := range 3 {
		n, src, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if src != from || !bytes.Equal(buf[:n], payload[i*seg:(i+1)*seg]) {
			t.Errorf("datagram %d from %v: %d bytes %x..., want %d bytes of %x from %v", i, src, n, buf[:1], seg, i, from)
		}
	}
}

// TestAttach attaches to a device that ip tuntap made, refuses one that
// does not exist, and leaves the device there on Close.
func TestAttach(t *testing.T) {
	inNewNetns(t)
	_, err := Attach("glmissing0", true)
	var missing *NoDeviceError
	if !errors.As(err, &missing) || missing.Name != "glmissing0" {
		t.Fatalf("Attach of a missing device: %v, want a NoDeviceError", err)
	}
	ip(t, "tuntap", "add", "dev", "glwan0", "mode", "tun")
	ip(t, "link", "set", "glwan0", "mtu", "1400")
	for _, offload := range []bool{true, false} {
		d, err := Attach("glwan0", offload)
		if err != nil {
			t.Fatal(err)
		}
		if mtu, _ := d.MTU(); mtu != 1400 {
			t.Errorf("offload %v: MTU %d, want 1400", offload, mtu)
		}
		if want := map[bool]int{true: 128, false: 1}[offload]; d.BatchSize() != want {
			t.Errorf("offload %v: BatchSize %d, want %d", offload, d.BatchSize(), want)
		}
		_, err = Attach("glwan0", offload)
		var busy *AttachError
		if !errors.As(err, &busy) || !errors.Is(err, unix.EBUSY) {
			t.Errorf("second Attach: %v, want an AttachError for EBUSY", err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	ip(t, "link", "show", "glwan0") // still there
}

func unsafeCmsg(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }
