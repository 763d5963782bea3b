package forward

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// pipeSize is what growPipe asks for: 1 MiB, the default
// /proc/sys/fs/pipe-max-size, so that a read can take ncBuffer at once.
const pipeSize = 1 << 20

// growPipe enlarges the pipe r reads, if it is one, from the kernel's
// 64 KiB: with the default size a fast writer wakes the reader for every
// 64 KiB at most. The size is a property of the pipe, shared with its
// writer, and only its capacity changes; failing (a user over the limit
// in pipe-user-pages-soft) leaves it as it was.
func growPipe(r io.Reader) {
	f, ok := r.(*os.File)
	if !ok {
		return
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return
	}
	sc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = sc.Control(func(fd uintptr) {
		if size, err := unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0); err == nil && size < pipeSize {
			_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize)
		}
	})
}
