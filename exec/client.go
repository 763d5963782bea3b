package exec

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/gridlink/gridlink/agent/control"
)

// IO are a command's local ends, for Run.
type IO struct {
	// Stdin is sent as the command's standard input; nil: none (the
	// command reads EOF at once).
	Stdin io.Reader
	// Stdout and Stderr receive the command's output; nil: discarded.
	Stdout, Stderr io.Writer
	// Signals are forwarded to the command's process group: SIGHUP,
	// SIGINT or SIGTERM (others are dropped).
	Signals <-chan int
	// Window carries a pty's new size, rows and columns.
	Window <-chan [2]uint16
}

// Run runs req on the exec service at the other end of c (a link to its
// Port) and returns how the command ended. node names the target in
// errors. A refusal is a *RefusedError; a service that breaks the
// protocol (a forged or malformed frame, credit for stdin never sent, a
// second start) a *ProtocolError; a connection that ends before the command's
// exit status an error saying so. Run closes c. When ctx ends, the
// command is sent SIGHUP and Run returns ctx's error. Run asks for no
// features (req.Features is ignored): stdin goes in frames on c.
func Run(ctx context.Context, c net.Conn, node string, req Request, stdio IO) (Status, error) {
	req.Features = nil
	return run(ctx, c, node, req, stdio, nil)
}

// run is Run; with lk, the request asks for a stdin link of its own
// (req.Features), and lk sends stdin on it if the service takes it.
func run(ctx context.Context, c net.Conn, node string, req Request, stdio IO, lk *stdinSender) (Status, error) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if err := req.Check(); err != nil {
		return Status{}, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Status{}, err
	}
	if len(body) > MaxRequest {
		return Status{}, fmt.Errorf("exec at %s: a request of %d bytes (command and environment), at most %d", node, len(body), MaxRequest)
	}
	w := &frameWriter{c: c}
	if err := w.send(FrameRequest, body); err != nil {
		return Status{}, orCtx(ctx, fmt.Errorf("exec at %s: sending the request: %w", node, err))
	}
	br := bufio.NewReaderSize(c, readBuffer)
	f, err := ReadFrame(br, FromService)
	answered := false // the service said which features it takes
	var token []byte  // its stdin link's, if it takes one
	if err == nil && f.Type == FrameFeatures {
		switch {
		case len(req.Features) == 0:
			return Status{}, fmt.Errorf("exec at %s: %w", node, &ProtocolError{Type: f.Type, Msg: "features the request did not ask for"})
		case f.Data[0]&featureStdinLink != 0 && (lk == nil || !req.wants(FeatureStdinLink)):
			return Status{}, fmt.Errorf("exec at %s: %w", node, &ProtocolError{Type: f.Type, Msg: "a stdin link the request did not ask for"})
		case f.Data[0]&featureStdinLink != 0:
			token = f.Data[1:]
		}
		answered = true
		f, err = ReadFrame(br, FromService)
		if err == nil && f.Type == FrameFeatures {
			err = &ProtocolError{Type: f.Type, Msg: "a second time"}
		}
	}
	switch {
	case err != nil:
		return Status{}, orCtx(ctx, readFailed(node, false, err))
	case f.Type == FrameRefused:
		if lk != nil && !answered {
			lk.old = true // a service that predates features: no 'F' before its refusal
		}
		return Status{}, &RefusedError{Node: node, Reason: string(f.Data)}
	case f.Type != FrameStarted:
		return Status{}, fmt.Errorf("exec at %s: %w", node, &ProtocolError{Type: f.Type, Msg: "before the command started"})
	}
	cr := newCredit()
	defer cr.close()
	quit := make(chan struct{})
	defer close(quit)
	if token != nil {
		lk.cut = func() { c.Close() }
		go lk.send(token)
	} else {
		go func() {
			if f, ok := stdio.Stdin.(*os.File); ok && spliceStdin(f, c, w, cr) {
				return
			}
			sendStdin(stdio.Stdin, w, cr)
		}()
	}
	go func() {
		for {
			select {
			case <-quit:
				return
			case sig := <-stdio.Signals:
				if sig == SIGHUP || sig == SIGINT || sig == SIGTERM {
					_ = w.send(FrameSignal, []byte{byte(sig)})
				}
			case ws := <-stdio.Window:
				if ws[0] != 0 && ws[1] != 0 {
					_ = w.send(FrameWindow, binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, ws[0]), ws[1]))
				}
			}
		}
	}()
	out, errw := orDiscard(stdio.Stdout), orDiscard(stdio.Stderr)
	// output is written before the next frame is read: one buffer serves
	data := make([]byte, MaxData)
	reuse := func(int) []byte { return data }
	for {
		f, err := readFrame(br, FromService, reuse)
		if err != nil {
			if lerr := lk.failed(); lerr != nil {
				return Status{}, lerr // stdin's link failed, which cut c
			}
			return Status{}, orCtx(ctx, readFailed(node, true, err))
		}
		switch f.Type {
		case FrameStdout:
			if _, err := out.Write(f.Data); err != nil {
				return Status{}, fmt.Errorf("exec at %s: writing its output: %w", node, err)
			}
		case FrameStderr:
			if _, err := errw.Write(f.Data); err != nil {
				return Status{}, fmt.Errorf("exec at %s: writing its error output: %w", node, err)
			}
		case FrameCredit:
			if err := cr.grant(int(binary.BigEndian.Uint32(f.Data))); err != nil {
				return Status{}, fmt.Errorf("exec at %s: %w", node, err)
			}
		case FrameExit:
			return parseExit(f.Data), nil
		default:
			return Status{}, fmt.Errorf("exec at %s: %w", node, &ProtocolError{Type: f.Type, Msg: "after the command started"})
		}
	}
}

// readFailed is the error of a failed frame read: the frame's fault (a
// *ProtocolError), or the connection's end (an *EndedError).
func readFailed(node string, started bool, err error) error {
	var pe *ProtocolError
	if errors.As(err, &pe) {
		return fmt.Errorf("exec at %s: %w", node, err)
	}
	e := &EndedError{Node: node, Started: started}
	if err != io.EOF {
		e.Read = err
	}
	return e
}

// EndedError is a connection that ended before the service answered, or
// before the command's exit status came: the target refused the caller
// in the handshake, the way to it failed, or the caller was cut off (a
// revoked certificate). Cause is why, when the caller's agent knows.
type EndedError struct {
	Node    string
	Started bool  // the command had started
	Read    error // how the read ended, if not at EOF (a reset, a frame cut short)
	Cause   error // the agent's word on why the link ended; nil if none
}

func (e *EndedError) Error() string {
	what := "before an answer"
	if e.Started {
		what = "before the command's exit status"
	}
	msg := fmt.Sprintf("exec at %s: the connection ended %s", e.Node, what)
	if e.Read != nil {
		msg += fmt.Sprintf(" (%v)", e.Read)
	}
	if e.Cause != nil {
		msg += fmt.Sprintf(": %v", e.Cause)
	}
	return msg
}

func (e *EndedError) Unwrap() error { return e.Cause }

// RunThrough runs req at node's exec service over a link the caller's
// agent c sets up (with the agent's credentials: a user's proxy when she
// runs her own agent), as Run does; a link that ends early says why, as
// the agent saw it (a refusal in the handshake: a proxy restricted to
// other services, a revoked certificate).
//
// Where the agent takes descriptors and stdin is a pipe or a file, stdin
// goes on a link of its own (frame.go, "stdin-link"), handed to the agent
// as gridlink nc hands its stdin: the agent forwards it as it forwards
// nc's, the far side's service writes it into the command's stdin as it
// comes; against a service that predates it, stdin goes in frames.
func RunThrough(ctx context.Context, c *control.Client, node string, lo control.LinkOptions, req Request, stdio IO) (Status, error) {
	req.Features = nil
	if lk := newStdinSender(c, node, lo, stdio.Stdin, req.Pty); lk != nil {
		defer lk.close()
		s, err := c.Open(ctx, control.ConnectRequest{Addr: dialAddr(node), Link: lo})
		if err != nil {
			return Status{}, err
		}
		lreq := req
		lreq.Features = []string{FeatureStdinLink}
		st, err := runStream(ctx, c, s, node, lo, lreq, stdio, lk)
		if !lk.old {
			return st, err
		}
		// a service that predates features refused the request for
		// them: again without, on a new link
	}
	s, err := c.Open(ctx, control.ConnectRequest{Addr: dialAddr(node), Link: lo})
	if err != nil {
		return Status{}, err
	}
	return runStream(ctx, c, s, node, lo, req, stdio, nil)
}

// runStream is RunThrough on the stream s the agent c opened.
func runStream(ctx context.Context, c *control.Client, s *control.Stream, node string, lo control.LinkOptions, req Request, stdio IO, lk *stdinSender) (Status, error) {
	conn, err := streamConn(s)
	if err != nil {
		s.Close()
		return Status{}, err
	}
	// the control connection: conn itself, or, with the pipes handed to
	// the agent, what keeps the stream alive until Run is done with it
	defer s.Close()
	st, err := run(ctx, conn, node, req, stdio, lk)
	var ee *EndedError
	if errors.As(err, &ee) && ee.Cause == nil {
		ectx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ee.Cause = s.End(ectx)
		cancel()
		var se *control.StreamError
		refused := errors.As(ee.Cause, &se) && se.Kind == control.KindNotAllowed
		if !ee.Started && !refused && ctx.Err() == nil {
			if why := probe(ctx, c, node, lo); why != nil {
				if ee.Cause != nil {
					why = fmt.Errorf("%w (this connection: %v)", why, ee.Cause)
				}
				ee.Cause = why
			}
		}
	}
	return st, err
}

// probeWait bounds probe's wait for a refusal.
const probeWait = 2 * time.Second

// probe asks why a connection to node's exec service ended before it
// answered, when the agent cannot say (the target cut a connection it had
// admitted, say when the caller was revoked meanwhile: the cut is not
// explained to the peer, whose agent saw at most a failed write): a new
// connection's refusal in its handshake, or nil if it is admitted. It sends nothing, so nothing runs; a service
// that admits it sees it close before its request and lets it go
// silently.
func probe(ctx context.Context, c *control.Client, node string, lo control.LinkOptions) error {
	pctx, cancel := context.WithTimeout(ctx, probeWait+5*time.Second)
	defer cancel()
	s, err := c.Open(pctx, control.ConnectRequest{Addr: dialAddr(node), Link: lo})
	if err != nil {
		return fmt.Errorf("a new connection: %w", err)
	}
	conn, err := s.Conn()
	if err != nil {
		s.Close()
		return nil
	}
	_ = conn.SetReadDeadline(time.Now().Add(probeWait))
	var one [1]byte
	_, rerr := conn.Read(one[:])
	conn.Close()
	var ne net.Error
	if errors.As(rerr, &ne) && ne.Timeout() {
		return nil // admitted: no reason to add
	}
	if why := s.End(pctx); why != nil {
		return fmt.Errorf("a new connection: %w", why)
	}
	return nil
}

// orCtx is ctx's error once it ended (what closed the connection), else err.
func orCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// sendStdin sends in as stdin frames within the credit, then its end.
// Each frame is read in place after its header and goes out in one
// write; a pipe as stdin is grown to carry whole frames (as nc grows its
// own), so that reads are a frame's size, not the pipe's default 64 KiB.
func sendStdin(in io.Reader, w *frameWriter, cr *credit) {
	if in != nil {
		if f, ok := in.(*os.File); ok {
			growPipe(f)
		}
		buf := make([]byte, frameHeader+MaxData)
		for {
			n, ok := cr.take(MaxData)
			if !ok {
				return
			}
			m, err := in.Read(buf[frameHeader : frameHeader+n])
			cr.giveBack(n - m)
			if m > 0 {
				if w.sendBuilt(FrameStdin, buf[:frameHeader+m]) != nil {
					return
				}
			}
			if err != nil {
				break // EOF, or stdin failed: the command reads its end either way
			}
		}
	}
	_ = w.send(FrameStdinEOF, nil)
}

// credit is the stdin bytes the client may still send.
type credit struct {
	mu     sync.Mutex
	cond   *sync.Cond
	n      int // may send
	out    int // sent (or reserved), not yet credited back
	closed bool
}

func newCredit() *credit {
	c := &credit{n: Window}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// take waits for credit and reserves up to max bytes of it.
func (c *credit) take(max int) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.n == 0 && !c.closed {
		c.cond.Wait()
	}
	if c.closed {
		return 0, false
	}
	n := min(max, c.n)
	c.n -= n
	c.out += n
	return n, true
}

// giveBack returns reserved credit that was not used.
func (c *credit) giveBack(n int) {
	c.mu.Lock()
	c.n += n
	c.out -= n
	c.cond.Signal()
	c.mu.Unlock()
}

// grant takes a credit frame: a service may give back only what was sent.
func (c *credit) grant(n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > c.out {
		return &ProtocolError{Type: FrameCredit, Msg: fmt.Sprintf("credit for %d bytes when %d are outstanding", n, c.out)}
	}
	c.out -= n
	c.n += n
	c.cond.Signal()
	return nil
}

func (c *credit) close() {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
}
