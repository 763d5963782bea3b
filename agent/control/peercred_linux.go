package control

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// PeerCred is the uid and pid of the process at the other end of a unix
// socket connection, as the kernel recorded them when it connected
// (SO_PEERCRED).
func PeerCred(c net.Conn) (uid, pid int, err error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, 0, errors.New("not a unix socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, 0, err
	}
	if cerr != nil {
		return -1, 0, cerr
	}
	return int(cred.Uid), int(cred.Pid), nil
}
