package exec

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// spliceStdin sends in as stdin frames, within the credit, then its end,
// without its bytes passing through this process: each frame's payload
// moves from in into a pipe of this process's, then from there into c
// after the frame's header, both by splice(2) (the kernel moves page
// references; nothing is copied into or out of this process). What is
// left of the cost is the kernel's, as when gridlink nc hands its stdin
// to the agent. in must be a pipe or a regular file, c a TCP or unix
// socket (the control socket a stream of the caller's agent goes
// through) or the pipe handed to the agent (streamConn); otherwise, or if the kernel refuses the first splice,
// spliceStdin sends nothing and returns false, and the caller copies.
func spliceStdin(in *os.File, c net.Conn, w *frameWriter, cr *credit) bool {
	switch c.(type) {
	case *net.UnixConn, *net.TCPConn, *pipeConn:
	default:
		return false
	}
	out, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return false
	}
	src, err := in.SyscallConn()
	if err != nil {
		return false
	}
	var kind uint32
	var nonblock bool
	if cerr := src.Control(func(fd uintptr) {
		var st unix.Stat_t
		if err = unix.Fstat(int(fd), &st); err != nil {
			return
		}
		kind = st.Mode & unix.S_IFMT
		fl, ferr := unix.FcntlInt(fd, unix.F_GETFL, 0)
		nonblock, err = fl&unix.O_NONBLOCK != 0, ferr
	}); cerr != nil || err != nil || (kind != unix.S_IFIFO && kind != unix.S_IFREG) {
		return false
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return false
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	_, _ = unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, pipeSize) // a frame's payload at once

	growPipe(in)
	first := true
	for {
		n, ok := cr.take(MaxData)
		if !ok {
			return true
		}
		// in → the pipe: what in has now, up to n bytes (0: its end)
		var moved int64
		var serr error
		if nonblock {
			err = src.Read(func(fd uintptr) bool {
				moved, serr = unix.Splice(int(fd), nil, p[1], nil, n, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				return serr != unix.EAGAIN
			})
		} else {
			err = src.Control(func(fd uintptr) { moved, serr = unix.Splice(int(fd), nil, p[1], nil, n, unix.SPLICE_F_MOVE) })
		}
		m := int(moved)
		if err == nil {
			err = serr
		}
		if m < 0 {
			m = 0
		}
		cr.giveBack(n - m)
		if err != nil && first && m == 0 {
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
				return false // this kernel or file cannot splice: copy
			}
		}
		first = false
		if m == 0 || err != nil {
			break // its end, or stdin failed: the command reads its end either way
		}
		if w.spliceFrame(FrameStdin, p[0], m, out) != nil {
			return true
		}
	}
	_ = w.send(FrameStdinEOF, nil)
	return true
}

// splicedFrames counts the frames spliceFrame sent (tests see which path
// stdin took).
var splicedFrames atomic.Int64

// spliceFrame sends a frame of typ whose m payload bytes wait in the pipe
// whose read end is pipe: the header, then the payload spliced from the
// pipe into the connection (out, its raw descriptor), as one frame among
// the writer's others.
func (w *frameWriter) spliceFrame(typ byte, pipe, m int, out syscall.RawConn) error {
	var hdr [frameHeader]byte
	putHeader(hdr[:], typ, m)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if _, w.err = w.c.Write(hdr[:]); w.err != nil {
		return w.err
	}
	var serr error
	err := out.Write(func(fd uintptr) bool {
		for m > 0 {
			k, err := unix.Splice(pipe, nil, int(fd), nil, m, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			if err == unix.EAGAIN {
				return false // the socket is full: wait until it takes more
			}
			if err != nil {
				serr = err
				return true
			}
			if k == 0 {
				serr = errors.New("splice moved nothing")
				return true
			}
			m -= int(k)
		}
		return true
	})
	if err == nil {
		err = serr
	}
	if err == nil {
		splicedFrames.Add(1)
	}
	w.err = err
	return err
}
