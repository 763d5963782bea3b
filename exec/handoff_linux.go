package exec

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gridlink/gridlink/agent/control"
)

// streamConn is the connection Run talks to the service over, on the
// stream s the caller's agent opened: where the agent takes descriptors,
// two pipes handed to it (control.Stream.Hand, as gridlink nc hands its
// stdin and stdout), the frames to the service written into one, the
// service's read from the other. The agent then reads the frames from a
// pipe, in reads as large as its buffer, as it reads nc's stdin; through
// the control socket it got them in pieces, each a write of its own to
// the link (BENCHMARKS.md, "Jobs across firewalls"). An agent that cannot
// take descriptors carries the frames on the control socket as before.
func streamConn(s *control.Stream) (net.Conn, error) {
	var toAgent, fromAgent [2]int
	if err := unix.Pipe2(toAgent[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return s.Conn()
	}
	if err := unix.Pipe2(fromAgent[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		unix.Close(toAgent[0])
		unix.Close(toAgent[1])
		return s.Conn()
	}
	// a frame and more in the pipe: the agent reads whole frames
	_, _ = unix.FcntlInt(uintptr(toAgent[1]), unix.F_SETPIPE_SZ, pipeSize)
	_, _ = unix.FcntlInt(uintptr(fromAgent[1]), unix.F_SETPIPE_SZ, pipeSize)
	agentIn, agentOut := os.NewFile(uintptr(toAgent[0]), "exec frames to the agent"), os.NewFile(uintptr(fromAgent[1]), "exec frames from the agent")
	mine := &pipeConn{r: os.NewFile(uintptr(fromAgent[0]), "exec frames from the service"), w: os.NewFile(uintptr(toAgent[1]), "exec frames to the service")}
	err := s.Hand(agentIn, agentOut)
	agentIn.Close() // the agent holds its own
	agentOut.Close()
	if err != nil {
		mine.Close()
		if errors.Is(err, control.ErrNoHandoff) {
			return s.Conn()
		}
		return nil, err
	}
	handedStreams.Add(1)
	return mine, nil
}

// handedStreams counts the streams whose pipes the agent took (tests see
// which way the frames went).
var handedStreams atomic.Int64

// pipeConn is the caller's ends of the pipes handed to the agent, as a
// connection: Read from the service, Write to it; CloseWrite ends what
// goes to the service (the agent half-closes the link), Close both.
type pipeConn struct{ r, w *os.File }

func (p *pipeConn) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p *pipeConn) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p *pipeConn) CloseWrite() error           { return p.w.Close() }
func (p *pipeConn) Close() error {
	p.w.Close()
	return p.r.Close()
}
func (p *pipeConn) LocalAddr() net.Addr  { return pipeAddr{} }
func (p *pipeConn) RemoteAddr() net.Addr { return pipeAddr{} }
func (p *pipeConn) SetDeadline(t time.Time) error {
	p.w.SetDeadline(t)
	return p.r.SetDeadline(t)
}
func (p *pipeConn) SetReadDeadline(t time.Time) error  { return p.r.SetDeadline(t) }
func (p *pipeConn) SetWriteDeadline(t time.Time) error { return p.w.SetDeadline(t) }

// SyscallConn is the write end's: what spliceStdin splices frames into.
func (p *pipeConn) SyscallConn() (syscall.RawConn, error) { return p.w.SyscallConn() }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "the agent's pipes" }
