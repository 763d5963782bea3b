package hub

import (
	"net"
	"syscall"
)

// setBacklog shortens a listener's accept queue (Go asks for somaxconn,
// 4096 by default): under a flood the queue stays full, and a newcomer
// waits in it for its length over the rate the hub drains it. Calling
// listen again on a listening socket changes its backlog.
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
