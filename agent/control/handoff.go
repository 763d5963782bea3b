package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"
)

// Handoff: the agent copies a stream's bytes itself.
//
// Through a plain stream request every byte crosses the client process
// and the control socket: the client copies between its local end (a TCP
// connection of gridlink forward or socks, stdin and stdout of nc) and the
// upgraded control connection, the agent between that and the link. With
// ConnectRequest.Handoff the client gives the agent its local end as file
// descriptors (SCM_RIGHTS) and the agent joins them to the link itself:
// one process, one socket and two copies fewer on the data path.
//
//	POST /connect {"handoff":true,...}
//	    → 101 with "Gridlink-Handoff: fds" (an agent that cannot take
//	      descriptors leaves it out and streams as without Handoff)
//	client → one byte:
//	    'F' with SCM_RIGHTS: one stream socket (both directions), or two
//	        descriptors, a read end then a write end: stream sockets,
//	        regular files, /dev/null, or pipes in non-blocking mode in
//	        open file descriptions of their own (the agent could not
//	        interrupt a blocking read, and must not change the mode of a
//	        description others share)
//	    'S' without descriptors: the control connection carries the
//	        bytes, as without Handoff
//	agent → after 'F', once the stream has ended, one event line,
//	    {"done":true} or {"error":...}, and it closes.
//
// Until that line the client keeps the control connection open and sends
// nothing: its closing (the client exited or gave up) or anything it sends
// cuts the stream. A socket is joined as Join does (both directions,
// half-closes carried through); a pair as nc joins stdin and stdout: the
// read end's EOF half-closes the link, and the stream ends when the far
// side's bytes end.
const (
	HandoffHeader = "Gridlink-Handoff"
	HandoffFDs    = "fds"
	ModeFDs       = 'F'
	ModeStream    = 'S'
	// MaxEnds is the most descriptors a handoff carries.
	MaxEnds = 2
)

// ErrNoHandoff says a stream's local end cannot be handed to the agent:
// the agent cannot take descriptors, or an end is none of the kinds it
// takes (a terminal, say). Nothing was sent; the stream can still carry
// the bytes here.
var ErrNoHandoff = errors.New("agent: the local end cannot be handed to the agent")

// Stream is a link set up by Open, waiting for its local end: handed to
// the agent (Hand, Join), or carried by this process (Conn). It is also
// the link's byte stream as a net.Conn; using it so chooses Conn.
type Stream struct {
	raw     net.Conn
	handoff bool // the agent takes descriptors
	client  *Client
	id      string // the agent's name for it (streamend.go); "" from an older agent

	mu   sync.Mutex
	mode byte // 0 until chosen: ModeFDs or ModeStream
}

// Open asks the agent for a link as Connect does, offering to hand it
// the local end.
func (c *Client) Open(ctx context.Context, req ConnectRequest) (*Stream, error) {
	req.Handoff = true
	conn, h, err := c.stream(ctx, "/connect", req)
	if err != nil {
		return nil, err
	}
	return &Stream{raw: conn, handoff: h.Get(HandoffHeader) == HandoffFDs, client: c, id: h.Get(StreamHeader)}, nil
}

// Conn chooses to carry the bytes through this process and returns the
// connection that carries them: the control socket itself, so that
// copies with TCP connections splice.
func (s *Stream) Conn() (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.mode {
	case ModeStream:
		return s.raw, nil
	case ModeFDs:
		return nil, errors.New("agent: the stream was handed to the agent")
	}
	if s.handoff {
		if _, err := s.raw.Write([]byte{ModeStream}); err != nil {
			return nil, fmt.Errorf("agent: stream: %w", err)
		}
	}
	s.mode = ModeStream
	return s.raw, nil
}

// Hand gives the agent the local end: one stream socket, or a read end
// and a write end (sockets, pipes, regular files, /dev/null). From then on the agent copies, and
// Wait reports the end. The caller may close its ends at once: the agent
// holds its own. ErrNoHandoff means nothing was sent.
func (s *Stream) Hand(ends ...syscall.Conn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mode != 0 {
		return errors.New("agent: the stream's local end was already chosen")
	}
	uc, ok := s.raw.(*net.UnixConn)
	if !s.handoff || !ok {
		return ErrNoHandoff
	}
	if err := sendEnds(uc, ends); err != nil {
		return err
	}
	s.mode = ModeFDs
	return nil
}

// Wait waits until the agent reports the end of a stream given to it
// with Hand, and closes the stream.
func (s *Stream) Wait() error {
	ev, err := ReadEvent(s.raw)
	s.raw.Close()
	switch {
	case err != nil:
		return fmt.Errorf("agent: handed stream: %w", err)
	case ev.Error != "":
		return &StreamError{Kind: orElse(ev.Kind, KindFailed), Msg: "agent: " + ev.Error}
	case !ev.Done:
		return errors.New("agent: handed stream: no end reported")
	}
	return nil
}

// Join joins local to the stream until both directions have ended (as
// Join does), then closes both, and returns why the stream failed (End),
// if it did. A TCP or unix socket goes to the agent
// (Hand) when it takes descriptors; otherwise this process copies.
func (s *Stream) Join(local net.Conn) error {
	defer local.Close()
	if sc, ok := local.(syscall.Conn); ok && KernelSocket(local) {
		err := s.Hand(sc)
		if err == nil {
			local.Close()
			return s.Wait()
		}
		if !errors.Is(err, ErrNoHandoff) {
			s.raw.Close()
			return err
		}
	}
	c, err := s.Conn()
	if err != nil {
		s.raw.Close()
		return err
	}
	Join(local, c)
	ctx, cancel := context.WithTimeout(context.Background(), endWait)
	defer cancel()
	return s.End(ctx)
}

// Close closes the stream; a handed one is cut.
func (s *Stream) Close() error { return s.raw.Close() }

// the net.Conn of Conn.

func (s *Stream) Read(p []byte) (int, error) {
	c, err := s.Conn()
	if err != nil {
		return 0, err
	}
	return c.Read(p)
}

func (s *Stream) Write(p []byte) (int, error) {
	c, err := s.Conn()
	if err != nil {
		return 0, err
	}
	return c.Write(p)
}

// CloseWrite half-closes the byte stream.
func (s *Stream) CloseWrite() error {
	c, err := s.Conn()
	if err != nil {
		return err
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("agent: stream cannot half-close")
}

func (s *Stream) LocalAddr() net.Addr                { return s.raw.LocalAddr() }
func (s *Stream) RemoteAddr() net.Addr               { return s.raw.RemoteAddr() }
func (s *Stream) SetDeadline(t time.Time) error      { return s.raw.SetDeadline(t) }
func (s *Stream) SetReadDeadline(t time.Time) error  { return s.raw.SetReadDeadline(t) }
func (s *Stream) SetWriteDeadline(t time.Time) error { return s.raw.SetWriteDeadline(t) }
