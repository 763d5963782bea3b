package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// handoffSupported: Linux agents take descriptors (handoff.go).
const handoffSupported = true

// maxEnds is the most descriptors a handoff carries.
const maxEnds = 2

// receiveEnds reads the client's choice: modeStream, or modeFDs with the
// local end built from the descriptors that came with it. Descriptors
// that do not make a valid end are closed.
func receiveEnds(uc *net.UnixConn) (byte, localEnd, error) {
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(maxEnds*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(b[:], oob)
	fds, perr := rights(oob[:oobn])
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	switch {
	case err != nil:
		closeAll()
		return 0, nil, err
	case n == 0:
		closeAll()
		return 0, nil, io.ErrUnexpectedEOF
	case perr != nil:
		closeAll()
		return 0, nil, perr
	case flags&unix.MSG_CTRUNC != 0:
		closeAll()
		return 0, nil, fmt.Errorf("more than %d descriptors", maxEnds)
	case b[0] == modeStream && len(fds) == 0:
		return modeStream, nil, nil
	case b[0] == modeFDs && len(fds) == 1:
		e, err := socketFromFD(fds[0])
		if err != nil {
			return 0, nil, err
		}
		return modeFDs, e, nil
	case b[0] == modeFDs && len(fds) == 2:
		in, err := fileFromFD(fds[0], false)
		if err != nil {
			unix.Close(fds[1])
			return 0, nil, fmt.Errorf("read end: %w", err)
		}
		out, err := fileFromFD(fds[1], true)
		if err != nil {
			in.Close()
			return 0, nil, fmt.Errorf("write end: %w", err)
		}
		return modeFDs, pairEnds{in: in, out: out}, nil
	}
	closeAll()
	return 0, nil, fmt.Errorf("choice %q with %d descriptors", b[0], len(fds))
}

// rights are the descriptors of SCM_RIGHTS messages in oob.
func rights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return fds, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// socketFromFD makes a TCP or unix stream socket of fd (which it takes).
func socketFromFD(fd int) (socketEnd, error) {
	if err := isStreamSocket(fd); err != nil {
		unix.Close(fd)
		return socketEnd{}, err
	}
	f := os.NewFile(uintptr(fd), "handed socket")
	c, err := net.FileConn(f) // a duplicate, non-blocking
	f.Close()
	if err != nil {
		return socketEnd{}, err
	}
	if !kernelSocket(c) {
		c.Close()
		return socketEnd{}, fmt.Errorf("a %T is not a stream socket", c)
	}
	return socketEnd{c}, nil
}

func isStreamSocket(fd int) error {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return fmt.Errorf("not a socket: %w", err)
	}
	if typ != unix.SOCK_STREAM {
		return fmt.Errorf("socket of type %d, not a stream socket", typ)
	}
	return nil
}

// fileFromFD makes a file of fd (which it takes), open for writing if
// write, else for reading: a stream socket (set non-blocking) or a pipe
// already non-blocking, both pollable, so that closing them ends a read
// or write that waits; or what never keeps a read or write waiting, a
// regular file or /dev/null.
func fileFromFD(fd int, write bool) (*os.File, error) {
	err := func() error {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err != nil {
			return err
		}
		switch acc := fl & unix.O_ACCMODE; {
		case write && acc == unix.O_RDONLY:
			return errors.New("not open for writing")
		case !write && acc == unix.O_WRONLY:
			return errors.New("not open for reading")
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFSOCK:
			if err := isStreamSocket(fd); err != nil {
				return err
			}
			return unix.SetNonblock(fd, true)
		case unix.S_IFIFO:
			if fl&unix.O_NONBLOCK == 0 {
				return errors.New("a pipe in blocking mode")
			}
			return nil
		}
		if neverWaits(&st) {
			return nil
		}
		return errors.New("neither a socket, a pipe, a regular file nor /dev/null")
	}()
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "handed "+strconv.Itoa(fd)), nil
}

// neverWaits says whether st is a file whose reads and writes never wait
// for another process: a regular file, or /dev/null.
func neverWaits(st *unix.Stat_t) bool {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return true
	case unix.S_IFCHR:
		return unix.Major(st.Rdev) == 1 && unix.Minor(st.Rdev) == 3
	}
	return false
}

// sendEnds sends modeFDs with the descriptors of ends: one stream socket,
// or two ends (read, write): sockets, regular files and /dev/null as they
// are (a file's offset stays shared, as if this process read or wrote
// it), pipes reopened non-blocking in descriptions of their own (through
// /proc/self/fd), so that the agent's non-blocking reads and writes leave
// the descriptions others share (a shell's, ssh's) as they were.
// ErrNoHandoff, without sending, for anything else (a terminal).
func sendEnds(uc *net.UnixConn, ends []syscall.Conn) error {
	if len(ends) < 1 || len(ends) > maxEnds {
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
	if _, _, err := uc.WriteMsgUnix([]byte{modeFDs}, unix.UnixRights(fds...), nil); err != nil {
		return fmt.Errorf("agent: hand off: %w", err)
	}
	return nil
}

// passable is the descriptor to send for fd: fd itself if it is a stream
// socket; in a pair also a regular file or /dev/null, or a pipe reopened
// non-blocking (for writing if write).
func passable(fd int, pair, write bool) (int, bool, error) {
	if isStreamSocket(fd) == nil {
		return fd, false, nil
	}
	var st unix.Stat_t
	if !pair || unix.Fstat(fd, &st) != nil {
		return -1, false, ErrNoHandoff
	}
	if neverWaits(&st) {
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
