//go:build unix && !linux

package exec

import (
	"errors"
	"os"
)

func openPty() (master, slave *os.File, err error) {
	return nil, nil, errors.New("ptys are supported on Linux only")
}

func setWinsize(f *os.File, rows, cols uint16) error { return errors.ErrUnsupported }

func growPipe(f *os.File) {}
