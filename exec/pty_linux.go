package exec

import (
	"os"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// openPty opens a new pseudo-terminal, its master and its slave
// (github.com/creack/pty). The master stays in Go's poller, so that
// closing it or a deadline ends a Read under way.
func openPty() (master, slave *os.File, err error) { return pty.Open() }

// setWinsize sets the terminal's size. The ioctl goes through the file's
// raw connection, which holds the descriptor for the call: a resize frame
// handled while the command ends and closes the master fails cleanly
// (pty.Setsize reads f.Fd(), which races with that Close).
func setWinsize(f *os.File, rows, cols uint16) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return err
	}
	return ioErr
}

// pipeSize is what growPipe asks for: a frame's worth and more.
const pipeSize = 1 << 20

// growPipe enlarges a pipe's buffer (Linux: F_SETPIPE_SZ); a refusal
// (above /proc/sys/fs/pipe-max-size for an unprivileged agent) leaves it.
func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize) })
	}
}
