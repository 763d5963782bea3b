package direct

import (
	"io"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// listenControl readies a listening socket for floods of connections that
// never speak (TCP_DEFER_ACCEPT): the kernel queues a connection for
// accept only once its first bytes arrive, or after FirstBytesTimeout,
// so idle connections cost neither a descriptor nor a place in the
// accept queue. Every client of ours speaks first (the TLS ClientHello).
func listenControl(_, _ string, c syscall.RawConn) error {
	return c.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, int(FirstBytesTimeout/time.Second))
	})
}

// PeekFirstRecord waits, within c's read deadline, until c's socket holds
// its peer's whole first TLS record (the ClientHello), without consuming
// it: the handshake then reads it from the socket itself, so the
// connection needs no wrapper (pki.Beneath hands out the TCP connection
// as it is). It returns an error wrapping ErrNotTLS for bytes that do not
// start a handshake record, and the read's error (a timeout, EOF) if the
// record does not come whole. A connection that is no socket is not
// checked.
func PeekFirstRecord(c net.Conn) error {
	rc := rawConn(c)
	if rc == nil {
		return nil
	}
	buf := make([]byte, recordHeader+maxRecord)
	want := recordHeader
	var perr error
	err := rc.Read(func(fd uintptr) bool {
		for {
			n, _, e := syscall.Recvfrom(int(fd), buf[:want], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case e == syscall.EAGAIN || e == syscall.EINTR:
				return false // wait for bytes
			case e != nil:
				perr = e
				return true
			case n == 0:
				perr = io.ErrUnexpectedEOF
				return true
			case n < want:
				return false // wait for more
			case want > recordHeader:
				return true // the whole record is in
			}
			size, err := recordSize(buf[:recordHeader])
			if err != nil {
				perr = err
				return true
			}
			want = recordHeader + size
		}
	})
	if err != nil {
		return err
	}
	return perr
}

// WholeFirstMessage tells, without waiting and without consuming
// anything, whether c's socket already holds its peer's whole first
// message: a whole TLS record (its ClientHello) or, when other is not
// "", the whole of other, if the bytes start as it does. It reports
// false for a connection that is no socket (it cannot tell).
func WholeFirstMessage(c net.Conn, other string) bool {
	rc := rawConn(c)
	if rc == nil {
		return false
	}
	whole := false
	_ = rc.Control(func(fd uintptr) {
		var hdr [recordHeader]byte
		n, _, e := syscall.Recvfrom(int(fd), hdr[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if e != nil || n == 0 {
			return
		}
		want := 0
		switch {
		case other != "" && string(hdr[:n]) == other[:min(n, len(other))]:
			want = len(other)
		case n == recordHeader:
			size, err := recordSize(hdr[:])
			if err != nil {
				return
			}
			want = recordHeader + size
		default:
			return
		}
		queued, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
		whole = err == nil && queued >= want
	})
	return whole
}

// SilentFor is how long c's peer has sent nothing: since its last data,
// or since the connection was set up if it sent none (TCP_INFO's
// last_data_recv, in milliseconds). ok is false where it cannot tell.
func SilentFor(c net.Conn) (d time.Duration, ok bool) {
	rc := rawConn(c)
	if rc == nil {
		return 0, false
	}
	_ = rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil {
			d, ok = time.Duration(info.Last_data_recv)*time.Millisecond, true
		}
	})
	return d, ok
}

// rawConn is c's socket, or nil for a connection that is no socket.
func rawConn(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}
