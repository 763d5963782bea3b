package hub

import (
	"net"
	"syscall"
)

// setBacklog caps a listener's accept queue at n (see listenBacklog).
// Calling listen again on a listening socket changes its backlog.
func setBacklog(ln net.Listener, n int) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) { _ = syscall.Listen(int(fd), n) })
}
