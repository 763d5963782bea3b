//go:build !linux

package wan

import (
	"errors"
	"os"
	"runtime"
)

var errUnsupported = errors.New("TUN devices and network namespaces need Linux, not " + runtime.GOOS)

type tunDevice struct{ vnet bool }

func openTUN(netns, dev string, offload bool) (*tunDevice, error) { return nil, errUnsupported }
func (t *tunDevice) Read(b []byte) (int, error)                   { return 0, errUnsupported }
func (t *tunDevice) Write(b []byte) (int, error)                  { return 0, errUnsupported }
func (t *tunDevice) Close() error                                 { return nil }

type sleeper struct{}

func newSleeper(sp *spinner) (*sleeper, error)     { return nil, errUnsupported }
func (s *sleeper) sleepUntil(deadline int64) error { return errUnsupported }
func (s *sleeper) Close() error                    { return nil }

func cpuLatencyQoS() (*os.File, error) { return nil, errUnsupported }
