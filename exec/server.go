package exec

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

// Config configures the exec service. The zero value works: the default
// grid-mapfile, logged to standard error.
type Config struct {
	// Mapfile is the grid-mapfile's path; empty: DefaultMapfile. It is
	// reread when it changes; while it cannot be read or parsed, every
	// command is refused naming the fault.
	Mapfile string
	// Logf logs every run and refusal; nil: standard error.
	Logf func(format string, args ...any)
	// MaxCommands bounds the commands running at once; more are refused
	// until one ends. Zero: DefaultMaxCommands.
	MaxCommands int
	// AcceptEnv are the environment variables of a request passed to the
	// command, as sshd's AcceptEnv: names or patterns with * and ?; the
	// others are dropped, the caller told (env.go). nil: DefaultAcceptEnv;
	// empty: none. Those that are never passed (the dynamic loader's, the
	// shell's start-up, PATH, ...) are refused whatever it says.
	AcceptEnv []string
	// AllowNologin runs commands as accounts whose login shell refuses
	// logins (nologin, false) with /bin/sh; false: they are refused.
	AllowNologin bool

	// lookup finds accounts (tests); nil: lookupAccount, the name service.
	lookup lookupFunc
}

// DefaultMaxCommands is Config.MaxCommands' default.
const DefaultMaxCommands = 256

// Service is a running exec service.
type Service struct {
	l    *link.Listener
	node *vconn.Node
	maps *mapSource
	logf func(string, ...any)
	// euid is the uid commands run as unless it is root's (0), which runs
	// them as the mapped account.
	euid int
	// slots holds a token per running command (MaxCommands).
	slots chan struct{}
	// env is the accept list of the environment (Config.AcceptEnv)
	env          *envPolicy
	allowNologin bool
	lookup       lookupFunc

	// links are the stdin links given out and not yet claimed, by token
	// (stdinlink.go).
	linksMu sync.Mutex
	links   map[[tokenSize]byte]*stdinLink
	// asOld makes the service answer as one that predates features:
	// a request listing any is refused as an unknown field (tests).
	asOld atomic.Bool

	wg sync.WaitGroup
}

// Listen starts the exec service on node's Port.
func Listen(node *vconn.Node, cfg Config) (*Service, error) {
	defaultSignals()
	env, err := newEnvPolicy(cfg.AcceptEnv)
	if err != nil {
		return nil, err
	}
	if cfg.lookup == nil {
		cfg.lookup = lookupAccount
	}
	if cfg.Mapfile == "" {
		cfg.Mapfile = DefaultMapfile
	}
	if cfg.Logf == nil {
		cfg.Logf = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "gridlink node: "+format+"\n", args...)
		}
	}
	l, err := link.Listen(node, Port, link.ListenOptions{})
	if err != nil {
		return nil, fmt.Errorf("exec service: %w", err)
	}
	if cfg.MaxCommands <= 0 {
		cfg.MaxCommands = DefaultMaxCommands
	}
	s := &Service{l: l, node: node, maps: &mapSource{path: cfg.Mapfile}, logf: cfg.Logf, euid: os.Geteuid(), slots: make(chan struct{}, cfg.MaxCommands),
		env: env, allowNologin: cfg.AllowNologin, lookup: cfg.lookup}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// Close stops accepting; commands under way go on until they end.
func (s *Service) Close() error {
	err := s.l.Close()
	s.wg.Wait()
	return err
}

func (s *Service) serve() {
	defer s.wg.Done()
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		go s.handle(c)
	}
}

// RefusedError is the service's refusal of a command: why it does not run.
// The service's log says the same.
type RefusedError struct {
	Node   string // the target, as the client named it
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("exec refused by %s: %s", e.Node, e.Reason)
}

// Unwrap makes it one of the refusal family (direct.ErrRefused).
func (e *RefusedError) Unwrap() error { return direct.ErrRefused }

// requestWait bounds the wait for a new connection's request.
const requestWait = 30 * time.Second

// handle serves one connection: the request, the caller's account, the
// command.
func (s *Service) handle(c net.Conn) {
	defer c.Close()
	var peer pki.Peer
	if lc, ok := c.(*link.Conn); ok {
		peer = lc.First().Proof()
	}
	from := c.RemoteAddr().String()
	if va, ok := c.RemoteAddr().(vconn.Addr); ok {
		// the caller's node (its port says nothing): its name, or its ID
		if from = va.Node.Name; from == "" {
			from = va.Node.ID.Short()
		}
	}
	who := fmt.Sprintf("%s from node %s", describePeer(peer), from)
	_ = c.SetReadDeadline(time.Now().Add(requestWait))
	br := bufio.NewReaderSize(c, readBuffer)
	f, err := ReadFrame(br, FromClient)
	if err == nil && f.Type == FrameJoin {
		_ = c.SetReadDeadline(time.Time{})
		s.joinStdin(c, br, peer, who, f.Data)
		return
	}
	if err == nil && f.Type != FrameRequest {
		err = &ProtocolError{Type: f.Type, Msg: "before the request"}
	}
	var req Request
	if err == nil {
		req, err = decodeRequest(f.Data)
	}
	_ = c.SetReadDeadline(time.Time{})
	if err == nil && len(req.Features) > 0 && s.asOld.Load() {
		err = &ProtocolError{Type: FrameRequest, Msg: `json: unknown field "features"`}
	}
	if err == io.EOF {
		return // closed before a request: nothing asked, nothing to refuse (a client's probe)
	}
	if err != nil {
		s.refuse(c, who, fmt.Sprintf("bad request: %v", err), nil)
		return
	}
	// a request that lists features hears which this service takes
	// before anything else: none but a stdin link, and that only for a
	// command that starts
	var none []byte
	if len(req.Features) > 0 {
		none = AppendFrame(nil, FrameFeatures, []byte{0})
	}
	release := func() {}
	acct, reason := s.authorize(peer, &req)
	if reason != "" {
		s.refuse(c, who, reason, none)
		return
	}
	pass, dropped, err := s.env.sift(s.node.Name(), req.Env)
	if err != nil {
		s.refuse(c, who, err.Error(), none)
		return
	}
	req.Env = pass
	select {
	case s.slots <- struct{}{}:
		// freed before the exit status goes out: a caller told its command
		// ended may start the next at once
		var once sync.Once
		release = func() { once.Do(func() { <-s.slots }) }
		defer release()
	default:
		s.refuse(c, who, fmt.Sprintf("%s runs %d commands already, the most its exec service allows at once", s.node.Name(), cap(s.slots)), none)
		return
	}
	w := &frameWriter{c: c}
	r, err := start(acct, &req, s.euid == 0)
	if err != nil {
		s.refuse(c, who, fmt.Sprintf("starting the command as %s: %v", acct.name, err), none)
		return
	}
	s.logf("exec: %s runs as %s (uid %d%s): %q%s", who, acct.name, acct.uid, acct.shellNote(), commandText(&req), envText(req.Env))
	var sl *stdinLink
	var feat []byte // the features frame's payload, if the request listed features
	if len(req.Features) > 0 {
		feat = []byte{0}
	}
	if req.wants(FeatureStdinLink) {
		if sl, err = s.expectStdin(peer); err == nil {
			defer s.forget(sl)
			feat = append([]byte{featureStdinLink}, sl.token[:]...)
		}
	}
	err = nil
	if feat != nil {
		err = w.send(FrameFeatures, feat)
	}
	if err == nil {
		err = w.send(FrameStarted, nil)
	}
	if err == nil && len(dropped) > 0 {
		// before the command's output: its copies start in run
		notice := s.env.droppedNotice(s.node.Name(), dropped)
		s.logf("exec: %s as %s: %s", who, acct.name, notice)
		err = w.send(FrameStderr, []byte(notice+"\n"))
	}
	if err != nil {
		r.hangup()
	}
	st, cause := r.run(br, w, sl)
	release()
	if cause != nil {
		s.logf("exec: %s as %s: %v", who, acct.name, cause)
	}
	s.logf("exec: %s as %s ended: %s", who, acct.name, st)
	if w.send(FrameExit, exitPayload(st)) == nil {
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		select {
		case <-r.callerDone():
		case <-time.After(drainWait):
		}
	}
}

// readBuffer is the size of both ends' buffered readers: small frames
// (requests, credit, signals, exit) come whole from it, while the bulk of
// a data frame's payload, read with a larger buffer than this, goes from
// the link into the payload's buffer without a copy through it.
const readBuffer = 32 << 10

// drainWait bounds the wait for a caller to close after its exit status.
const drainWait = 10 * time.Second

// refuse logs a refusal and tells the caller in the same words, after
// pre (the features frame of a request that listed features).
func (s *Service) refuse(c net.Conn, who, reason string, pre []byte) {
	reason = cleanReason(reason)
	s.logf("exec: refused %s: %s", who, reason)
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, _ = c.Write(AppendFrame(pre, FrameRefused, []byte(reason)))
}

// describePeer names a caller for the log: its subject and how it proved
// it.
func describePeer(p pki.Peer) string {
	if p.Chain == nil {
		return p.String()
	}
	return fmt.Sprintf("%q (%s)", SubjectDN(p.Chain.EndEntity), p)
}

// frameWriter sends frames from several goroutines, one whole frame at a
// time.
type frameWriter struct {
	mu  sync.Mutex
	c   net.Conn
	buf []byte
	err error
}

// sendBuilt sends a frame built in place: b holds the header's room
// (frameHeader bytes) and then the payload, which is not copied.
func (w *frameWriter) sendBuilt(typ byte, b []byte) error {
	putHeader(b, typ, len(b)-frameHeader)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	_, w.err = w.c.Write(b)
	return w.err
}

func (w *frameWriter) send(typ byte, data []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.buf = AppendFrame(w.buf[:0], typ, data)
	_, w.err = w.c.Write(w.buf)
	return w.err
}

// errClientGone says the caller's connection ended before the command.
var errClientGone = errors.New("the caller's connection ended before the command: its process group was sent SIGHUP")
