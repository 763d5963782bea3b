package xfer

import (
	"os"

	"golang.org/x/sys/unix"
)

// fsSpace returns the bytes free to unprivileged users and the size of
// the file system f is on.
func fsSpace(f *os.File) (free, size uint64, err error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var st unix.Statfs_t
	if cerr := rc.Control(func(fd uintptr) { err = unix.Fstatfs(int(fd), &st) }); cerr != nil {
		return 0, 0, cerr
	}
	if err != nil {
		return 0, 0, err
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}
