package hub

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// SetCongestion sets the TCP congestion control of c (TCP_CONGESTION,
// e.g. "bbr"). It fails where the kernel lacks the algorithm or does not
// allow it, and on a connection that is not a socket (an ssh tunnel's
// pipe): callers fall back to the kernel's default by ignoring the error.
func SetCongestion(c net.Conn, algo string) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return errors.New("not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, algo)
	}); err != nil {
		return err
	}
	return serr
}

// Congestion is the TCP congestion control c runs ("" if c is not a TCP
// socket).
func Congestion(c net.Conn) string {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return ""
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return ""
	}
	var name string
	_ = rc.Control(func(fd uintptr) {
		name, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	return name
}
