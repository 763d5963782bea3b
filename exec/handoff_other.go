//go:build !linux

package exec

import (
	"net"
	"sync/atomic"

	"github.com/gridlink/gridlink/agent/control"
)

// streamConn: the frames go through the control socket (handing pipes
// to the agent is Linux's, handoff_linux.go).
func streamConn(s *control.Stream) (net.Conn, error) { return s.Conn() }

// handedStreams stays 0 (handoff_linux.go's).
var handedStreams atomic.Int64
