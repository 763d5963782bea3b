package peercred

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// UID is the uid of the account whose socket is the other end of c: for
// a unix socket, the process's that connected (SO_PEERCRED); for TCP,
// the owner of the socket of this host whose local and remote addresses
// are c's remote and local ones, from the kernel's socket table
// (sock_diag), as long as that socket is open (a socket its process has
// closed has no owner left: a NotLocalError). A client on another host
// has no socket here: a NotLocalError.
func UID(c net.Conn) (int, error) {
	switch la := c.LocalAddr().(type) {
	case *net.UnixAddr:
		uid, _, err := Unix(c)
		return uid, err
	case *net.TCPAddr:
		ra, ok := c.RemoteAddr().(*net.TCPAddr)
		if !ok {
			return -1, fmt.Errorf("peercred: a TCP connection with remote address %v", c.RemoteAddr())
		}
		return tcpUID(la, ra)
	}
	return -1, fmt.Errorf("peercred: %T: neither a unix socket nor TCP", c.LocalAddr())
}

// tcpUID looks up the socket from remote to local (the other end of a
// connection accepted at local) in the kernel's socket table: as an IPv4
// socket when both addresses are IPv4, else (or when there is none: a
// dual-stack socket connected to an IPv4-mapped address) as IPv6.
func tcpUID(local, remote *net.TCPAddr) (int, error) {
	families := []uint8{unix.AF_INET6}
	if local.IP.To4() != nil && remote.IP.To4() != nil {
		families = []uint8{unix.AF_INET, unix.AF_INET6}
	}
	for _, f := range families {
		s, err := lookup(f, remote, local)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return -1, fmt.Errorf("peercred: the kernel's socket table (sock_diag): %w", err)
		}
		// an exact lookup can fall back to a listener: the ends must match
		if !sameEnd(s.src, s.sport, remote) || !sameEnd(s.dst, s.dport, local) || s.inode == 0 {
			// inode 0: no file: its process closed it (an orphan, or
			// TIME-WAIT), and the kernel reports such a socket as root's
			continue
		}
		return int(s.uid), nil
	}
	return -1, &NotLocalError{Remote: remote.String()}
}

func sameEnd(ip net.IP, port uint16, a *net.TCPAddr) bool {
	return int(port) == a.Port && ip.Equal(a.IP)
}

// lookup asks the kernel (sock_diag, NETLINK_INET_DIAG) for the TCP
// socket of family from local to remote: one exact lookup, not a dump of
// the table. Not found: ENOENT.
func lookup(family uint8, local, remote *net.TCPAddr) (diagMsg, error) {
	req := nl.NewNetlinkRequest(nl.SOCK_DIAG_BY_FAMILY, unix.NLM_F_ACK) // the ack ends the answer
	req.AddData(diagReq{family: family, local: local, remote: remote})
	msgs, err := req.Execute(unix.NETLINK_INET_DIAG, nl.SOCK_DIAG_BY_FAMILY)
	if err != nil {
		return diagMsg{}, err
	}
	if len(msgs) != 1 {
		return diagMsg{}, fmt.Errorf("%d answers to an exact lookup", len(msgs))
	}
	return parseDiagMsg(msgs[0])
}

// Unix is the uid and pid of the process at the other end of a unix
// socket connection, as the kernel recorded them when it connected
// (SO_PEERCRED).
func Unix(c net.Conn) (uid, pid int, err error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, 0, errors.New("peercred: not a socket")
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
