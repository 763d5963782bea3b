//go:build !linux

package agent

import (
	"errors"
	"net"
)

// handoffSupported: only Linux agents take descriptors (handoff.go).
const handoffSupported = false

func receiveEnds(*net.UnixConn) (byte, localEnd, error) {
	return 0, nil, errors.New("descriptors cannot be handed to this agent")
}
