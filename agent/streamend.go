package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/pki"
)

// Why a stream ended, for clients that copy its bytes themselves (the
// agent's side; control.Stream.End asks).
//
// A client that carries a connect's bytes through the control connection
// (nc on a terminal; forward and socks where the agent cannot take the
// socket) sees only the byte stream end. So the agent names every connect
// stream in its 101 answer,
//
//	Gridlink-Stream: ID          (decimal)
//
// remembers the first failure of the stream's overlay side (reading or
// writing the link: a hub on the way died, the peer was revoked), and
// answers, once the client has seen the stream end,
//
//	GET /stream/ID/end → 200 Event: {"done":true} (the overlay side has
//	                     not failed) or {"error":MSG,"kind":KIND}
//
// Only the uid that made the stream may ask (403, KindCallerRefused,
// logged, for any other); an unknown or forgotten ID is 404. A stream is
// remembered while it lasts, and for endKeep after, at most endMax ended
// ones (the oldest are forgotten first).
const (
	endKeep = time.Minute
	endMax  = 1024
)

// streamEnd is what the agent remembers of one stream.
type streamEnd struct {
	uid   int
	mu    sync.Mutex
	err   error // the overlay side's first failure
	cut   bool  // the agent closed the overlay side: later errors are its own
	ended time.Time
}

func (e *streamEnd) fail(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil && !e.cut {
		e.err = err
	}
}

// reason is the overlay side's failure so far, if any.
func (e *streamEnd) reason() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// streamEnds are the agent's remembered streams.
type streamEnds struct {
	mu    sync.Mutex
	next  uint64
	byID  map[uint64]*streamEnd
	ended []uint64 // in the order they ended
}

// add remembers a new stream of the caller uid.
func (s *streamEnds) add(uid int) (uint64, *streamEnd) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = make(map[uint64]*streamEnd)
	}
	s.next++
	e := &streamEnd{uid: uid}
	s.byID[s.next] = e
	return s.next, e
}

// done marks stream id ended; it is forgotten later.
func (s *streamEnds) done(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.byID[id]; e != nil {
		e.ended = time.Now()
		s.ended = append(s.ended, id)
	}
	s.prune()
}

func (s *streamEnds) prune() {
	now := time.Now()
	for len(s.ended) > 0 {
		e := s.byID[s.ended[0]]
		if len(s.ended) <= endMax && e != nil && now.Sub(e.ended) < endKeep {
			return
		}
		delete(s.byID, s.ended[0])
		s.ended = s.ended[1:]
	}
}

func (s *streamEnds) get(id uint64) *streamEnd {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prune()
	return s.byID[id]
}

// overlay wraps a stream's overlay side to record its failures in e.
type overlay struct {
	net.Conn
	e *streamEnd
}

func (o overlay) Read(p []byte) (int, error) {
	n, err := o.Conn.Read(p)
	if err != nil && err != io.EOF {
		o.e.fail(err)
	}
	return n, err
}

func (o overlay) Write(p []byte) (int, error) {
	n, err := o.Conn.Write(p)
	if err != nil {
		o.e.fail(err)
	}
	return n, err
}

func (o overlay) Close() error {
	o.e.mu.Lock()
	o.e.cut = true
	o.e.mu.Unlock()
	return o.Conn.Close()
}

// overlayCW is an overlay whose connection half-closes.
type overlayCW struct{ overlay }

func (o overlayCW) CloseWrite() error {
	err := o.Conn.(interface{ CloseWrite() error }).CloseWrite()
	if err != nil {
		o.e.fail(err)
	}
	return err
}

// joinStream joins the client's control connection c to the overlay side
// up (as Join does), recording up's failures as stream id's end.
func (a *Agent) joinStream(c, up net.Conn, id uint64, e *streamEnd, addr string) {
	var w net.Conn = overlay{up, e}
	if _, ok := up.(interface{ CloseWrite() error }); ok {
		w = overlayCW{overlay{up, e}}
	}
	if _, _, err := control.JoinErr(c, w); err != nil {
		a.logf("agent: stream %d to %s: %v", id, addr, err)
	}
	a.ends.done(id)
}

// streamEnd answers GET /stream/ID/end.
func (a *Agent) streamEnd(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	e := a.ends.get(id)
	if err != nil || e == nil {
		streamFail(w, http.StatusNotFound, control.KindBadRequest, fmt.Errorf("stream %s: unknown (or ended over %v ago)", r.PathValue("id"), endKeep))
		return
	}
	p, _ := r.Context().Value(peerKey{}).(peerCreds)
	if p.uid != e.uid {
		err := fmt.Errorf("stream %d belongs to uid %d, not to uid %d", id, e.uid, p.uid)
		a.refused("control socket: %v (pid %d, %s %s)", err, p.pid, r.Method, r.URL.Path)
		streamFail(w, http.StatusForbidden, control.KindCallerRefused, err)
		return
	}
	ev := control.Event{Done: true}
	if err := e.reason(); err != nil {
		kind := control.KindFailed
		if errors.Is(err, pki.ErrDenied) {
			kind = control.KindNotAllowed // the far side refused the caller in its handshake
		}
		ev = control.Event{Error: err.Error(), Kind: kind}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ev)
}
