package exec

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/gridlink/gridlink/agent/control"
)

// newStdinSender is a stdinSender for stdin in, or nil when stdin is
// better sent in frames: none, a terminal, a socket (anything but a pipe
// or a regular file), or a pty asked for.
func newStdinSender(c *control.Client, node string, lo control.LinkOptions, in io.Reader, pty bool) *stdinSender {
	f, ok := in.(*os.File)
	if !ok || pty {
		return nil
	}
	st, err := f.Stat()
	if err != nil || (st.Mode()&os.ModeNamedPipe == 0 && !st.Mode().IsRegular()) {
		return nil
	}
	return (&stdinSender{c: c, node: node, lo: lo, in: f}).init()
}

// linkedStdins counts the stdin links whose pipe the agent took (tests
// see which way stdin went).
var linkedStdins atomic.Int64

// send opens stdin's link and sends 'J' and stdin on it until stdin's
// end; a link that cannot be opened, or that the service refuses, fails
// Run with the reason.
func (k *stdinSender) send(token []byte) {
	if err := k.pump(token); err != nil {
		k.fail(err)
	}
}

func (k *stdinSender) pump(token []byte) error {
	in := k.in.(*os.File)
	s, err := k.c.Open(k.ctx, control.ConnectRequest{Addr: dialAddr(k.node), Link: k.lo})
	if err != nil {
		return fmt.Errorf("exec at %s: stdin's link: %w", k.node, err)
	}
	if !k.opened(s) {
		return nil
	}
	join := AppendFrame(nil, FrameJoin, token)
	// the agent's ends: a pipe stdin is spliced into (its read end
	// non-blocking, as the agent takes pipes; the write end blocking, so
	// that a splice into it waits for room in the kernel), and a pipe
	// for the service's answer (a refusal, or nothing)
	var toAgent, fromAgent [2]int
	if err := unix.Pipe2(toAgent[:], unix.O_CLOEXEC); err != nil {
		return k.copyThrough(s, in, join)
	}
	if err := unix.Pipe2(fromAgent[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		unix.Close(toAgent[0])
		unix.Close(toAgent[1])
		return k.copyThrough(s, in, join)
	}
	_ = unix.SetNonblock(toAgent[0], true)
	_, _ = unix.FcntlInt(uintptr(toAgent[1]), unix.F_SETPIPE_SZ, pipeSize)
	agentIn, agentOut := os.NewFile(uintptr(toAgent[0]), "stdin to the agent"), os.NewFile(uintptr(fromAgent[1]), "stdin link's answer")
	pw, answer := os.NewFile(uintptr(toAgent[1]), "stdin to the agent"), os.NewFile(uintptr(fromAgent[0]), "stdin link's answer")
	err = s.Hand(agentIn, agentOut)
	agentIn.Close() // the agent holds its own
	agentOut.Close()
	if err != nil {
		pw.Close()
		answer.Close()
		if errors.Is(err, control.ErrNoHandoff) {
			return k.copyThrough(s, in, join)
		}
		return fmt.Errorf("exec at %s: stdin's link: %w", k.node, err)
	}
	linkedStdins.Add(1)
	go k.watch(answer)
	defer pw.Close() // stdin's end: the agent half-closes the link
	if _, err := pw.Write(join); err != nil {
		return nil // the agent let the link go: Run is over, or the link failed (watch says why)
	}
	growPipe(in)
	_ = spliceAll(in, pw) // a failed write: as above; a failed read of stdin: its end, for the command
	return nil
}

// copyThrough sends 'J' and stdin on the link s through this process:
// the agent cannot take descriptors.
func (k *stdinSender) copyThrough(s *control.Stream, in *os.File, join []byte) error {
	c, err := s.Conn()
	if err != nil {
		return fmt.Errorf("exec at %s: stdin's link: %w", k.node, err)
	}
	go k.watch(c)
	if _, err := c.Write(join); err != nil {
		return nil
	}
	_, _ = io.Copy(c, in)
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	return nil
}

// watch reads the service's answer on stdin's link: nothing (its end), or
// a refusal, which fails Run.
func (k *stdinSender) watch(r io.ReadCloser) {
	defer r.Close()
	f, err := ReadFrame(r, FromService)
	if err == nil && f.Type == FrameRefused {
		k.fail(&RefusedError{Node: k.node, Reason: string(f.Data)})
	}
}

// spliceAll moves in's bytes into the pipe out until in's end: by
// splice(2) when in is a pipe or a file in blocking mode (the kernel moves
// them; a splice waits in the kernel for in's bytes and for room in out),
// else by reads and writes.
func spliceAll(in, out *os.File) error {
	src, err := in.SyscallConn()
	if err != nil {
		return copyAll(in, out)
	}
	dst, err := out.SyscallConn()
	if err != nil {
		return copyAll(in, out)
	}
	nonblock := true
	_ = src.Control(func(fd uintptr) {
		if fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0); err == nil {
			nonblock = fl&unix.O_NONBLOCK != 0
		}
	})
	if nonblock {
		return copyAll(in, out) // a splice could not wait for in alone
	}
	first := true
	for {
		var n int64
		var serr error
		err := src.Control(func(sfd uintptr) {
			if cerr := dst.Control(func(dfd uintptr) {
				n, serr = unix.Splice(int(sfd), nil, int(dfd), nil, pipeSize, unix.SPLICE_F_MOVE)
			}); cerr != nil {
				serr = cerr
			}
		})
		if err == nil {
			err = serr
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil && first && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS)) {
			return copyAll(in, out) // nothing moved: this kernel or file cannot splice
		}
		first = false
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}

// copyAll copies in to out in reads as large as a frame.
func copyAll(in, out *os.File) error {
	buf := make([]byte, MaxData)
	_, err := io.CopyBuffer(struct{ io.Writer }{out}, struct{ io.Reader }{in}, buf)
	return err
}
