package control

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// sendFiles sends msg with the descriptors of files.
func sendFiles(uc *net.UnixConn, msg []byte, files []*os.File) error {
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	_, _, err := uc.WriteMsgUnix(msg, unix.UnixRights(fds...), nil)
	return err
}
