package xfer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"github.com/gridlink/gridlink/pki/proxy"
)

// Port is the default virtual port of a transfer service (GridFTP's).
const Port = 2811

// Link is what a push asks of the link from source to target.
type Link struct {
	Streams  int    // 0 for automatic tuning, else a count
	Compress string // as link.ParseCompression reads it; "" for off
}

// Config configures a transfer service. The zero value serves the working
// directory and refuses pushes.
type Config struct {
	// Root is the served directory (default "."): every path of a request
	// is relative to it, and none may leave it ("..", absolute paths,
	// symbolic links pointing out are refused).
	Root string
	// Push dials target's transfer service for a push (third-party
	// transfer) from this one, with the credential that Delegation
	// returned (nil without Delegation: the service's own identity). Nil
	// refuses pushes.
	Push func(ctx context.Context, target string, l Link, cred *proxy.Credential) (net.Conn, error)
	// Delegation, if set, runs the authorization step of a push.
	Delegation Delegation
	// Logf, if set, logs each request and its outcome.
	Logf func(format string, args ...any)
	// Quota bounds the bytes of file data the served tree holds, what was
	// there when the service started included (0: no bound); UserQuota
	// bounds the bytes each user's uploads add, as User names the user of
	// a connection, counted across restarts in the root's StateFile. See
	// quota.go for what they count; a put that would exceed one is refused
	// (QuotaError), in words to the client and in the log. Whatever they
	// say, a put that does not fit on the file system is refused too
	// (SpaceError, see space.go).
	Quota, UserQuota int64
	// User names the user of a client connection for UserQuota: in
	// gridlink the subject its certificate proves (a delegated proxy's
	// user, for pushes), else its node ID. Nil or "": only Quota applies.
	User func(net.Conn) string
}

// Server is a transfer service.
type Server struct {
	cfg    Config
	root   *os.Root
	name   string // the root's base name, the name of a request for "."
	busy   busySet
	made   madeSet
	quotas *quotas
	counts serverCounters // for metrics (counters.go)
	held   heldPushes     // pushes whose caller paused them (hold.go)
}

// NewServer opens cfg.Root, measures what it holds for cfg.Quota and
// reads its StateFile for cfg.UserQuota (a QuotaStateError if that cannot
// be read or saved).
func NewServer(cfg Config) (*Server, error) {
	if cfg.Root == "" {
		cfg.Root = "."
	}
	abs, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, err
	}
	r, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("xfer: served root: %w", err)
	}
	s := &Server{cfg: cfg, root: r, name: filepath.Base(abs)}
	if s.name == "/" || s.name == "." {
		s.name = "root"
	}
	if s.quotas, err = openQuotas(r, cfg.Quota, cfg.UserQuota, s.logf); err != nil {
		r.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the served root.
func (s *Server) Close() error { return s.root.Close() }

// Serve answers clients on l until ctx ends or l is closed; each
// connection is one request, served on its own.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(ctx, c)
		}()
	}
}

// noteUnfinished logs where an unfinished earlier copy into dest is, for
// a copy that goes into dest by scp's rules.
func (s *Server) noteUnfinished(dest string) {
	if n := unfinishedNote(servedTree(s.root), dest); n != "" {
		s.logf("xfer: %s", n)
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// serveConn serves one request on c.
func (s *Server) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	ep := newEndpoint(c)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	typ, p, err := ep.recv()
	if err != nil {
		s.logf("xfer: %s: no request: %v", c.RemoteAddr(), err)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	var req request
	if typ != mRequest {
		err = fmt.Errorf("%w: message %d instead of a request", errFrame, typ)
	} else {
		req, err = decodeRequest(p)
	}
	if err == nil {
		err = s.check(&req)
	}
	if err != nil {
		s.logf("xfer: %s: refused: %v", c.RemoteAddr(), err)
		_ = ep.sendNow(mRefuse, enc(nil).str(err.Error()))
		return
	}
	start := time.Now()
	tl := tally{live: s.counts.movedBy(req.op)}
	switch req.op {
	case opGet:
		if err = ep.sendNow(mAccept, []byte{0}); err == nil {
			err = send(ctx, ep, servedTree(s.root), req.paths, req.recursive, s.top, nil, int64(req.limit), nil, &tl)
		}
	case opPut:
		var d destination
		if d, err = s.destination(req); err != nil {
			s.logf("xfer: %s: refused: %v", c.RemoteAddr(), err)
			_ = ep.sendNow(mRefuse, enc(nil).str(err.Error()))
			return
		}
		defer d.close()
		user := ""
		if s.cfg.User != nil {
			user = s.cfg.User(c)
		}
		d.recursive = req.recursive
		d.asked, _ = announced(req.paths) // checked (check)
		if err = ep.sendNow(mAccept, []byte{d.place}); err == nil {
			err = receive(ep, d, req.resume, &s.busy, &s.made, s.quotas.charge(user), nil, &tl, user)
		}
	case opPush:
		var pushed Summary // what the push did, for the counters
		err = s.push(ctx, ep, req, &pushed)
		failed := err
		if failed == nil && pushed.Error != "" {
			failed = errors.New(pushed.Error)
		}
		s.counts.end(opPush, pushed, failed)
	}
	sum := tl.summary()
	if req.op != opPush {
		s.counts.end(req.op, sum, err)
	}
	for i, fe := range sum.Errors {
		if i == maxLogged {
			s.logf("xfer: %s: %d more entries failed", c.RemoteAddr(), len(sum.Errors)-i)
			break
		}
		s.logf("xfer: %s: %s: %s", c.RemoteAddr(), fe.Path, fe.Error)
	}
	if err != nil {
		s.logf("xfer: %s: %s %v -> %s: %v (%d files, %d failed, %d bytes sent)", c.RemoteAddr(), opName(req.op), req.paths, req.dest, err, sum.Files, sum.Failed, sum.Sent)
		return
	}
	s.logf("xfer: %s: %s %v -> %s: %d files, %d failed, %d bytes sent, %d kept in %.2f s", c.RemoteAddr(), opName(req.op), req.paths,
		req.dest, sum.Files, sum.Failed, sum.Sent, sum.Kept, time.Since(start).Seconds())
}

// maxLogged bounds the failed entries a session logs one by one.
const maxLogged = 10

func opName(op uint8) string {
	return map[uint8]string{opGet: "get", opPut: "put", opPush: "push"}[op]
}

// check cleans the paths of a request, refusing it if one leaves the root;
// a put's, if its destination holds a control character, or it does not
// name its sources by plain names (announced).
func (s *Server) check(r *request) error {
	var err error
	if r.op == opPut {
		if r.dest, err = cleanRel(r.dest); err != nil {
			return err
		}
		if reserved(r.dest) {
			return &ReservedPathError{Path: r.dest}
		}
		if why := controlIn(r.dest); why != "" {
			return &UnsafePathError{Path: r.dest, Reason: why, Dest: true}
		}
		if _, err := announced(r.paths); err != nil {
			return err
		}
	}
	for i, p := range r.paths {
		if r.op == opPut {
			break // a sender's names, not paths here
		}
		if r.paths[i], err = cleanRel(p); err != nil {
			return err
		}
		if reserved(r.paths[i]) {
			return &ReservedPathError{Path: r.paths[i]}
		}
	}
	if r.op == opPush && s.cfg.Push == nil {
		return errors.New("this service does not push to other services (third-party transfers)")
	}
	return nil
}

// destination opens where a put stores its entries: into dest if the
// client said so or it is a directory, else as dest.
func (s *Server) destination(req request) (destination, error) {
	var place uint8
	switch {
	case req.flags&flagInto != 0:
		place = placeInto
	case req.flags&flagAs != 0:
		place = placeAs
	default: // a first attempt: a retry keeps the placement it was told
		var err error
		if place, err = placement(servedTree(s.root), req.dest); err != nil {
			return destination{}, err
		}
		var top string
		if place, top = resumed(servedTree(s.root), req.dest, place, req.resume); top == "" && place == placeInto {
			s.noteUnfinished(req.dest)
		}
		return openDest(servedTree(s.root), req.dest, place, top)
	}
	return openDest(servedTree(s.root), req.dest, place, "")
}

// top names the entries of a request path: its base name, the root's for
// the root itself.
func (s *Server) top(name string) string {
	if name == "." {
		return s.name
	}
	return path.Base(name)
}

// push runs a third-party transfer: the authorization step (Delegation),
// then a put to the target, reporting progress and the summary to the
// caller on ep. The caller going away cancels it.
// What it did is left in *did.
func (s *Server) push(ctx context.Context, ep *endpoint, req request, did *Summary) error {
	if err := ep.sendNow(mAccept, []byte{0}); err != nil {
		return err
	}
	var ask []byte
	var accept func([]byte) (*proxy.Credential, error)
	var err error
	if s.cfg.Delegation != nil {
		if ask, accept, err = s.cfg.Delegation.Begin(req.target); err != nil {
			return err
		}
	}
	if err := ep.sendNow(mDelegate, enc(nil).bytes(ask)); err != nil {
		return err
	}
	typ, p, err := ep.recv()
	if err != nil {
		return err
	}
	if typ != mDelegate {
		return fmt.Errorf("%w: message %d instead of a delegation answer", errFrame, typ)
	}
	answer, err := decodeBlob(p)
	if err != nil {
		return err
	}
	var cred *proxy.Credential
	if accept != nil {
		if cred, err = accept(answer); err != nil {
			*did = Summary{Error: "delegation: " + err.Error()}
			return s.result(ep, *did)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hold := new(Hold)
	s.held.add(hold)
	defer s.held.remove(hold)
	go func() { // the caller pauses and resumes (mHold, mGo): anything else, or its going, ends the push
		defer cancel()
		defer hold.Resume() // a held sender sees ctx end
		buf := new([]byte)
		for {
			typ, p, err := readFrame(ep.r, buf)
			if err != nil {
				return
			}
			pause, err := callerMessage(typ, p)
			if err != nil {
				s.logf("xfer: push to %s: %v", req.target, err)
				return
			}
			if pause {
				hold.Pause()
			} else {
				hold.Resume()
			}
		}
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_ = ep.flush()
			}
		}
	}()
	dial := func(ctx context.Context) (net.Conn, error) {
		return s.cfg.Push(ctx, req.target, Link{Streams: int(req.streams), Compress: req.compress}, cred)
	}
	o := Options{Recursive: req.recursive, Resume: req.resume, Limit: int64(req.limit), Logf: s.cfg.Logf, Hold: hold,
		Progress: func(e Event) { _ = ep.send(mEvent, e.encode()) }}
	sum, err := put(ctx, dial, servedTree(s.root), req.paths, s.top, req.dest, o)
	if err != nil && !errors.Is(err, ErrSourceChanged) { // the summary tells the caller which files changed
		sum.Error = err.Error()
	}
	*did = sum
	if err != nil && sum.Error == "" {
		did.Error = err.Error()
	}
	return s.result(ep, sum)
}

func (s *Server) result(ep *endpoint, sum Summary) error {
	b, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	return ep.sendNow(mResult, b)
}
