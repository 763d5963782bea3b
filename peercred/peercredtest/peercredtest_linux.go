package peercredtest

import (
	"net"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// NeedRoot skips t unless it runs as root.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("playing another account needs root")
	}
}

// DialAs connects to addr on network ("tcp", "unix") from a socket that
// uid owns: the socket is made on a thread whose effective uid is uid
// for the call (setresuid on that thread alone, which then ends), as
// another account's process would make it. It needs root.
func DialAs(t testing.TB, uid int, network, addr string) net.Conn {
	t.Helper()
	c, err := dialAs(uid, network, addr)
	if err != nil {
		t.Fatalf("dial %s as uid %d: %v", addr, uid, err)
	}
	return c
}

func dialAs(uid int, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine: its uid goes with it
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
			res <- result{nil, e}
			return
		}
		c, err := net.Dial(network, addr)
		res <- result{c, err}
	}()
	r := <-res
	return r.c, r.err
}
