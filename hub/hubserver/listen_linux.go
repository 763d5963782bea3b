package hubserver

import (
	"net"
	"syscall"
	"time"
)

// tuneListener readies the hub's listening socket for floods of
// connections that never speak: the kernel queues a connection for
// accept only once its first bytes arrive (TCP_DEFER_ACCEPT, for
// direct.FirstBytesTimeout; a peer that stays silent longer is queued
// then, and the first-bytes deadline applies), so idle connections cost
// neither a descriptor nor a place in the accept queue; and the accept
// queue is capped at listenBacklog. Calling listen again on a listening
// socket changes its backlog.
func tuneListener(ln net.Listener, backlog int, deferAccept time.Duration) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, int(deferAccept/time.Second))
		_ = syscall.Listen(int(fd), backlog)
	})
}
