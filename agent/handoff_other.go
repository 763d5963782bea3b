//go:build !linux

package agent

import (
	"errors"
	"net"
	"syscall"
)

// handoffSupported: only Linux agents take descriptors (handoff.go).
const handoffSupported = false

func receiveEnds(*net.UnixConn) (byte, localEnd, error) {
	return 0, nil, errors.New("descriptors cannot be handed to this agent")
}

func sendEnds(*net.UnixConn, []syscall.Conn) error { return ErrNoHandoff }
