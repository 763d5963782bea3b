package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/gridlink/gridlink/agent/control"
)

// handoffSupported: Linux agents take descriptors (handoff.go).
const handoffSupported = true

// receiveEnds reads the client's choice: control.ModeStream, or control.ModeFDs with the
// local end built from the descriptors that came with it. Descriptors
// that do not make a valid end are closed.
func receiveEnds(uc *net.UnixConn) (byte, localEnd, error) {
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(control.MaxEnds*4))
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
		return 0, nil, fmt.Errorf("more than %d descriptors", control.MaxEnds)
	case b[0] == control.ModeStream && len(fds) == 0:
		return control.ModeStream, nil, nil
	case b[0] == control.ModeFDs && len(fds) == 1:
		e, err := socketFromFD(fds[0])
		if err != nil {
			return 0, nil, err
		}
		return control.ModeFDs, e, nil
	case b[0] == control.ModeFDs && len(fds) == 2:
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
		return control.ModeFDs, pairEnds{in: in, out: out}, nil
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
	if err := control.IsStreamSocket(fd); err != nil {
		unix.Close(fd)
		return socketEnd{}, err
	}
	f := os.NewFile(uintptr(fd), "handed socket")
	c, err := net.FileConn(f) // a duplicate, non-blocking
	f.Close()
	if err != nil {
		return socketEnd{}, err
	}
	if !control.KernelSocket(c) {
		c.Close()
		return socketEnd{}, fmt.Errorf("a %T is not a stream socket", c)
	}
	return socketEnd{c}, nil
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
			if err := control.IsStreamSocket(fd); err != nil {
				return err
			}
			return unix.SetNonblock(fd, true)
		case unix.S_IFIFO:
			if fl&unix.O_NONBLOCK == 0 {
				return errors.New("a pipe in blocking mode")
			}
			return nil
		}
		if control.NeverWaits(&st) {
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
