package direct

import (
	"net"

	"golang.org/x/sys/unix"
)

// quickAck wraps the TCP connection under an ssh tunnel so that every read
// re-arms TCP_QUICKACK: the kernel then acknowledges at once instead of
// delaying the ACK by up to 40 ms. OpenSSH leaves Nagle's algorithm on for
// non-interactive sessions such as port forwarding, so each small message
// it sends waits for our ACK of the previous one; with delayed ACKs every
// round trip through the tunnel would grow by tens of milliseconds.
func quickAck(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &quickAckConn{TCPConn: tc, set: func() {
		_ = rc.Control(func(fd uintptr) {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1)
		})
	}}
}

type quickAckConn struct {
	*net.TCPConn
	set func()
}

func (c *quickAckConn) Read(p []byte) (int, error) {
	n, err := c.TCPConn.Read(p)
	c.set()
	return n, err
}
