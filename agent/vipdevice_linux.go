package agent

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/tun"
)

// vipClaimBound bounds a device's setup (its addresses' claims).
const vipClaimBound = 2 * time.Minute

// runDevice takes the device handed on c, runs the virtual network on it
// and stops it when c ends.
func (a *Agent) runDevice(c net.Conn, h VIPHost, setup control.VIPSetup, pid int) {
	defer c.Close()
	released := false
	defer func() {
		if !released {
			a.vip.release()
		}
	}()
	fail := func(kind string, err error) {
		a.refused("virtual network device of pid %d refused: %v", pid, err)
		a.vip.release()
		released = true
		_, _ = c.Write(control.AppendEvent(nil, control.Event{Error: err.Error(), Kind: kind}))
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		fail(control.KindBadRequest, fmt.Errorf("the client sent bytes before the device"))
		return
	}
	_ = uc.SetReadDeadline(time.Now().Add(handoffWait))
	var b [control.MaxVIPMessage]byte
	oob := make([]byte, unix.CmsgSpace(control.MaxVIPFDs*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(b[:], oob)
	_ = uc.SetReadDeadline(time.Time{})
	fds, perr := rights(oob[:oobn])
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "handed")
	}
	closeAll := func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}
	switch {
	case err != nil:
		closeAll()
		fail(control.KindBadRequest, fmt.Errorf("no device: %w", err))
		return
	case perr != nil || flags&unix.MSG_CTRUNC != 0 || n < 2 || b[0] != control.ModeFDs || (len(files) != 1 && len(files) != 3):
		closeAll()
		fail(control.KindBadRequest, fmt.Errorf("want 'F' with a TUN device and no or two name sockets, got %d bytes and %d descriptors", n, len(files)))
		return
	}
	nspid, err := strconv.Atoi(string(b[1:n]))
	if err != nil || nspid <= 0 {
		closeAll()
		fail(control.KindBadRequest, fmt.Errorf("the namespace's pid %q is no number", b[1:n]))
		return
	}
	a.vip.setNamespace(nspid)
	var names *NameSockets
	if len(files) == 3 {
		names, err = nameSockets(files[1], files[2])
		files[1], files[2] = nil, nil
		if err != nil {
			files[0].Close()
			fail(control.KindBadRequest, err)
			return
		}
	}
	dev, err := tun.FromFile(files[0], setup.MTU) // takes it
	if err != nil {
		names.close()
		fail(control.KindBadRequest, err)
		return
	}
	stop, err := h.Run(dev, names)
	if err != nil {
		dev.Close()
		names.close()
		fail(control.KindFailed, err)
		return
	}
	name, _ := dev.Name()
	a.logf("agent: virtual network on device %s of pid %d, namespace of pid %d (%v)", name, pid, nspid, setup.Addrs)
	if _, err := c.Write(control.AppendEvent(nil, control.Event{Ready: true})); err == nil {
		// the client's closing (or anything it sends) gives the device back
		_, _ = c.Read(b[:])
	}
	err = stop()
	a.logf("agent: virtual network on device %s of pid %d stopped: %v", name, pid, err)
	// the slot is free before the client hears so: its next exec is taken
	a.vip.release()
	released = true
	_, _ = c.Write(control.AppendEvent(nil, control.Event{Done: true}))
}

// nameSockets checks and wraps the handed name sockets: a UDP socket and
// a listening TCP socket (which they take).
func nameSockets(udp, tcp *os.File) (*NameSockets, error) {
	defer udp.Close()
	defer tcp.Close()
	if typ, err := unix.GetsockoptInt(int(udp.Fd()), unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_DGRAM {
		return nil, fmt.Errorf("the first name socket is no UDP socket")
	}
	if on, err := unix.GetsockoptInt(int(tcp.Fd()), unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || on != 1 {
		return nil, fmt.Errorf("the second name socket is no listening socket")
	}
	pc, err := net.FilePacketConn(udp)
	if err != nil {
		return nil, fmt.Errorf("name socket: %w", err)
	}
	l, err := net.FileListener(tcp)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("name socket: %w", err)
	}
	if _, ok := pc.(*net.UDPConn); !ok {
		pc.Close()
		l.Close()
		return nil, fmt.Errorf("the first name socket is a %T, not UDP", pc)
	}
	if _, ok := l.(*net.TCPListener); !ok {
		pc.Close()
		l.Close()
		return nil, fmt.Errorf("the second name socket is a %T, not TCP", l)
	}
	return &NameSockets{UDP: pc, TCP: l}, nil
}

func (n *NameSockets) close() {
	if n != nil {
		n.UDP.Close()
		n.TCP.Close()
	}
}
