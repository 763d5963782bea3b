package control

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// sendFiles sends ModeFDs with the descriptors of files.
func sendFiles(uc *net.UnixConn, files []*os.File) error {
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	_, _, err := uc.WriteMsgUnix([]byte{ModeFDs}, unix.UnixRights(fds...), nil)
	return err
}
