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

// setWinsize sets the terminal's size.
func setWinsize(f *os.File, rows, cols uint16) error {
	return pty.Setsize(f, &pty.Winsize{Rows: rows, Cols: cols})
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
