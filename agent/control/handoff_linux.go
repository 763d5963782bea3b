package control

import (
	"fmt"
	"net"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// IsStreamSocket says why fd is no stream socket, or nil if it is one:
// what a one-descriptor handoff must be.
func IsStreamSocket(fd int) error {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return fmt.Errorf("not a socket: %w", err)
	}
	if typ != unix.SOCK_STREAM {
		return fmt.Errorf("socket of type %d, not a stream socket", typ)
	}
	return nil
}

// NeverWaits says whether st is a file whose reads and writes never wait
// for another process: a regular file, or /dev/null.
func NeverWaits(st *unix.Stat_t) bool {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return true
	case unix.S_IFCHR:
		return unix.Major(st.Rdev) == 1 && unix.Minor(st.Rdev) == 3
	}
	return false
}

// sendEnds sends ModeFDs with the descriptors of ends: one stream socket,
// or two ends (read, write): sockets, regular files and /dev/null as they
// are (a file's offset stays shared, as if this process read or wrote
// it), pipes reopened non-blocking in descriptions of their own (through
// /proc/self/fd), so that the agent's non-blocking reads and writes leave
// the descriptions others share (a shell's, ssh's) as they were.
// ErrNoHandoff, without sending, for anything else (a terminal).
func sendEnds(uc *net.UnixConn, ends []syscall.Conn) error {
	if len(ends) < 1 || len(ends) > MaxEnds {
		return fmt.Errorf("agent: hand off %d ends: want 1 or 2", len(ends))
	}
	var fds, opened []int
	defer func() {
		for _, fd := range opened {
			unix.Close(fd)
		}
	}()
	for i, e := range ends {
		rc, err := e.SyscallConn()
		if err != nil {
			return ErrNoHandoff
		}
		fd, reopened := -1, false
		cerr := rc.Control(func(raw uintptr) {
			fd, reopened, err = passable(int(raw), len(ends) == 2, i == 1)
		})
		if cerr != nil || err != nil {
			return ErrNoHandoff
		}
		if reopened {
			opened = append(opened, fd)
		}
		fds = append(fds, fd)
	}
	// the ends' own descriptors stay open until the agent has its copies:
	// the caller closes them after Hand returns.
	if _, _, err := uc.WriteMsgUnix([]byte{ModeFDs}, unix.UnixRights(fds...), nil); err != nil {
		return fmt.Errorf("agent: hand off: %w", err)
	}
	return nil
}

// passable is the descriptor to send for fd: fd itself if it is a stream
// socket; in a pair also a regular file or /dev/null, or a pipe reopened
// non-blocking (for writing if write).
func passable(fd int, pair, write bool) (int, bool, error) {
	if IsStreamSocket(fd) == nil {
		return fd, false, nil
	}
	var st unix.Stat_t
	if !pair || unix.Fstat(fd, &st) != nil {
		return -1, false, ErrNoHandoff
	}
	if NeverWaits(&st) {
		return fd, false, nil
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return -1, false, ErrNoHandoff
	}
	mode := unix.O_RDONLY
	if write {
		mode = unix.O_WRONLY
	}
	nfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), mode|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, false, ErrNoHandoff
	}
	return nfd, true, nil
}
