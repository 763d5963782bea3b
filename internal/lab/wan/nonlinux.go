//go:build !linux

package wan

import (
	"errors"
	"os"
	"runtime"

	"github.com/gridlink/gridlink/tun"
)

var errUnsupported = errors.New("TUN devices and network namespaces need Linux, not " + runtime.GOOS)

func openTUN(netns, dev string, offload bool) (tun.Device, error) { return nil, errUnsupported }

type sleeper struct{}

func newSleeper(sp *spinner) (*sleeper, error)     { return nil, errUnsupported }
func (s *sleeper) sleepUntil(deadline int64) error { return errUnsupported }
func (s *sleeper) Close() error                    { return nil }

func cpuLatencyQoS() (*os.File, error) { return nil, errUnsupported }
