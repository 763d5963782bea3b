//go:build unix

package agent

import (
	"io/fs"
	"syscall"
)

// ownerUID is the uid that owns a file, as its stat says.
func ownerUID(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
