//go:build !linux

package exec

import (
	"io"
	"sync/atomic"

	"github.com/gridlink/gridlink/agent/control"
)

// newStdinSender: stdin links are Linux's (stdinsend_linux.go); elsewhere
// stdin goes in frames.
func newStdinSender(c *control.Client, node string, lo control.LinkOptions, in io.Reader, pty bool) *stdinSender {
	return nil
}

func (k *stdinSender) send(token []byte) {}

// linkedStdins stays 0 (stdinsend_linux.go's).
var linkedStdins atomic.Int64
