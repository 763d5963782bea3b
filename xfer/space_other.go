//go:build !linux

package xfer

import (
	"errors"
	"os"
)

// fsSpace is not implemented here: free space is not checked before a
// transfer (a full file system still stops it, with a SpaceError).
func fsSpace(*os.File) (free, size uint64, err error) {
	return 0, 0, errors.ErrUnsupported
}
