package link

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

// A resumable link survives the loss of the connections beneath it. Its
// session holds the link's two directions, a Writer and a Reader in their
// resumable form (writer_resume.go, reader_resume.go), over every
// connection the link has: each connection carries blocks both ways, and
// acks of each direction travel among the other's blocks. When a
// connection dies the session closes it and the Writer sends what it
// carried, unacknowledged, on the others. When none is left the link
// pauses: Write goes on until the window is full, then waits; Read waits.
// The dialling end calls its redial function until a connection is back
// (package link does not set connections up: the caller's function does,
// by whatever method, through Conn's join handshake; resume.go's
// newSession takes it ready to carry blocks), the accepting end waits for
// its Listener to hand it the joiner. If none comes within
// Config.ResumeTimeout of the last one's death, the link fails: Read,
// Write and Close return a *LostError naming that connection, how it died
// and when.
//
// Closing (close): the Writer's end block goes on every connection, then
// the session waits for the peer's acks of the whole stream; then it
// acknowledges the peer's stream as delivered, if it came whole, with a
// final ack on every connection, and waits until the peer's final ack
// came and every connection has brought the peer's end and final ack, so
// that it closes none with bytes unread (which would reset it,
// destroying what the peer still had to read), and does not go while
// the peer still waits to hear that its stream arrived (the link down
// meanwhile: it waits for a connection back).

// ErrLost is wrapped by the error of a resumable link that lost all its
// connections and got none back in time (*LostError).
var ErrLost = errors.New("link: lost")

// LostError is a resumable link's failure: its last connection died and
// no other came within Timeout.
type LostError struct {
	Link LinkID
	// End is the end that reports it: "dialler" (which set connections
	// up again, Redial) or "acceptor" (which waited for them).
	End string
	// Conn names the last connection that died (its addresses and, on a
	// link over vconn, how it was set up).
	Conn string
	// Sending says it died under a write of this end; else a read of this
	// end failed or ended.
	Sending bool
	// Err is how it died.
	Err error
	// At is when.
	At      time.Time
	Timeout time.Duration
	// Redial is the last failed attempt of this end to set one up again
	// (nil on the accepting end, which waits for the dialler).
	Redial error
}

func (e *LostError) Error() string {
	op := "reading"
	if e.Sending {
		op = "sending"
	}
	s := fmt.Sprintf("link %s lost at the %s's end: its last connection, %s, died %s at %s (%v), and no other came back within %s",
		e.Link, e.End, e.Conn, op, e.At.Format("15:04:05.000"), e.Err, e.Timeout)
	if e.Redial != nil {
		s += fmt.Sprintf(" (last redial: %v)", e.Redial)
	}
	return s
}

// Unwrap gives ErrLost and how the connection died.
func (e *LostError) Unwrap() []error { return []error{ErrLost, e.Err} }

// session is a resumable link's two directions over its connections.
type session struct {
	id      LinkID
	timeout time.Duration
	redial  func(context.Context) (net.Conn, error) // nil: wait for joiners
	w       *Writer
	r       *Reader
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu        sync.Mutex
	live      []*duplex
	joined    int // connections ever added
	downAt    time.Time
	last      *LostError // the last death: what a failure reports
	timer     *time.Timer
	redialing bool
	redialErr error
	err       error // the link failed
	closed    bool
	changed   chan struct{} // closed and replaced when live changes or the link fails
}

// newSession starts a resumable link over conns with window w (the
// ResendBuffer agreed) and cfg's other settings.
func newSession(id LinkID, cfg Config, window int, redial func(context.Context) (net.Conn, error), conns ...net.Conn) *session {
	cfg = cfg.withDefaults()
	s := &session{id: id, timeout: cfg.ResumeTimeout, redial: redial, changed: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	cfg.resume = &resumeHooks{
		window: window,
		lost:   s.lost,
		ack:    func(off uint64, final bool) { s.w.sendAck(off, final) },
		acked:  func(off uint64) error { return s.w.ack(off) },
		aborted: func(err error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if err != nil && !s.closed {
				s.failLocked(err)
			}
		},
	}
	s.w = NewWriter(cfg)
	s.r = NewReader(cfg)
	for _, c := range conns {
		_ = s.add(c)
	}
	return s
}

// add makes c a connection of the link, ready to carry blocks both ways.
func (s *session) add(c net.Conn) error {
	s.mu.Lock()
	if s.closed || s.err != nil {
		s.mu.Unlock()
		return ErrClosed
	}
	send, recv := newDuplex(c)
	s.live = append(s.live, send.d)
	s.joined++
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.downAt = time.Time{}
	s.signalLocked()
	s.mu.Unlock()
	if err := s.r.AddStream(recv); err != nil {
		s.drop(send.d)
		return err
	}
	if err := s.w.AddStream(send); err != nil {
		s.drop(send.d)
		return err
	}
	return nil
}

func (s *session) signalLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// drop forgets d and closes its connection.
func (s *session) drop(d *duplex) {
	s.mu.Lock()
	for i, t := range s.live {
		if t == d {
			s.live = append(s.live[:i], s.live[i+1:]...)
			break
		}
	}
	s.signalLocked()
	s.mu.Unlock()
	_ = d.c.Close()
}

// lost is told by the Writer or the Reader that the connection of which c
// is a half died.
func (s *session) lost(c any, err error, sending bool) {
	h, ok := c.(*half)
	if !ok {
		return
	}
	d := h.d
	s.mu.Lock()
	i := -1
	for j, t := range s.live {
		if t == d {
			i = j
		}
	}
	if i < 0 || s.closed {
		s.mu.Unlock()
		// a connection already given up (its sending died): its
		// receiving half's drain is over
		_ = d.c.Close()
		return
	}
	s.live = append(s.live[:i], s.live[i+1:]...)
	now := time.Now()
	end := "acceptor"
	if s.redial != nil {
		end = "dialler"
	}
	s.last = &LostError{Link: s.id, End: end, Conn: connName(d.c), Sending: sending, Err: err, At: now, Timeout: s.timeout}
	var cut *vconn.CutError
	if errors.As(err, &cut) && s.err == nil {
		// this node cut it: the peer is no longer admitted (revoked), and
		// no connection to it will come back
		s.failLocked(err)
	}
	if len(s.live) == 0 && s.err == nil {
		s.downAt = now
		s.timer = time.AfterFunc(s.timeout, s.expire)
		if s.redial != nil && !s.redialing {
			s.redialing = true
			s.wg.Add(1)
			go s.redialLoop()
		}
	}
	s.signalLocked()
	s.mu.Unlock()
	if sending {
		// What the peer sent before the connection died may still wait
		// unread, its abort block among them (the peer closed the link,
		// and says so): the receiving half reads on for lostDrain, then
		// fails, and its loss closes the connection.
		_ = d.c.SetReadDeadline(time.Now().Add(lostDrain))
	} else {
		_ = d.c.Close() // the sending half's goroutine notices
	}
	s.w.loseConn(d.sendHalf, err)
}

// lostDrain is how long a connection whose sending died is still read
// from (see lost).
const lostDrain = 250 * time.Millisecond

func connName(c net.Conn) string {
	if st, ok := c.(fmt.Stringer); ok {
		return st.String()
	}
	if a := c.RemoteAddr(); a != nil && a.Network() != "pipe" {
		return fmt.Sprintf("%s -> %s", c.LocalAddr(), a)
	}
	return "a connection"
}

// expire fails the link if it is still without a connection.
func (s *session) expire() {
	s.mu.Lock()
	if len(s.live) > 0 || s.closed || s.err != nil || s.downAt.IsZero() {
		s.mu.Unlock()
		return
	}
	e := *s.last
	e.Redial = s.redialErr
	s.failLocked(&e)
	s.mu.Unlock()
}

// failLocked fails the link with err: Read, Write and Close return it.
func (s *session) failLocked(err error) {
	if s.err != nil {
		return
	}
	s.err = err
	s.cancel()
	s.signalLocked()
	s.w.fail(err, err.Error())
	s.r.fail(err)
}

// maxRedialBackoff bounds the wait between a resumable link's redials:
// how much later than possible a link may resume once a path is back (a
// failed redial costs a lookup or a circuit's refusal at most).
const maxRedialBackoff = 500 * time.Millisecond

// redialLoop sets up connections again until one is back, the link fails
// or closes. A refusal (the acceptor no longer has the link) or a denial
// in the peer's handshake (this end is no longer admitted there, e.g.
// revoked) fails the link at once: waiting cannot help.
func (s *session) redialLoop() {
	defer s.wg.Done()
	retry := backoff.ExponentialBackOff{InitialInterval: 20 * time.Millisecond, Multiplier: 2, MaxInterval: maxRedialBackoff}
	for {
		s.mu.Lock()
		if len(s.live) > 0 || s.err != nil || s.closed {
			s.redialing = false
			s.mu.Unlock()
			return
		}
		deadline := s.downAt.Add(s.timeout)
		s.mu.Unlock()
		ctx, cancel := context.WithDeadline(s.ctx, deadline)
		c, err := s.redial(ctx)
		cancel()
		if err == nil {
			if s.add(c) != nil {
				c.Close()
			}
			continue
		}
		s.mu.Lock()
		s.redialErr = err
		if (errors.Is(err, direct.ErrRefused) || errors.Is(err, pki.ErrDenied)) && s.err == nil && !s.closed && s.last != nil {
			e := *s.last
			e.Redial = err
			s.failLocked(&e)
		}
		s.mu.Unlock()
		select {
		case <-s.ctx.Done():
		case <-time.After(retry.NextBackOff()):
		}
	}
}

// failure is the link's failure, if any.
func (s *session) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// connections is the number of connections the link has now.
func (s *session) connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

// waitFor waits until cond holds, the link fails, or d passes; it
// reports whether cond held. cond is checked whenever the session
// changes, and every 10ms.
func (s *session) waitFor(d time.Duration, cond func() bool) bool {
	return s.waitLinked(d, d, cond)
}

// waitLinked is waitFor counting towards linked only the time the link
// has a connection (a paused link waits for one to come back, until it
// fails after ResumeTimeout), and giving up after limit in all.
func (s *session) waitLinked(linked, limit time.Duration, cond func() bool) bool {
	last := time.Now()
	deadline := last.Add(limit)
	wasLinked := false
	for {
		if cond() {
			return true
		}
		s.mu.Lock()
		changed, failed, isLinked := s.changed, s.err != nil, len(s.live) > 0
		s.mu.Unlock()
		now := time.Now()
		if wasLinked {
			linked -= now.Sub(last)
		}
		last, wasLinked = now, isLinked
		if failed || linked <= 0 || !now.Before(deadline) {
			return false
		}
		select {
		case <-changed:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// close ends the link as the package doc's Resumable links part says,
// giving up on the peer after linger, and stops it. It returns once this
// end's outcome is known: if both streams arrived whole, the session
// lingers in the background until the peer said it is done too (or
// finalWait connected, linger in all), as TCP's TIME-WAIT does, so that
// the peer can resume the link to hear that its stream arrived. stopped,
// if not nil, is called once the session has stopped.
func (s *session) close(linger time.Duration, stopped func()) error {
	werr := s.w.Close()
	if errors.Is(werr, ErrClosed) {
		werr = nil // CloseWrite came first
	}
	var err error
	if !s.waitFor(linger, s.w.isFinished) {
		err = s.failure()
		if err == nil {
			err = fmt.Errorf("link %s: closing: the peer did not acknowledge the stream within %s (%d of %d bytes)", s.id, linger, s.w.Stats().Acked, s.w.Stats().Written)
		}
	}
	// The peer's end may be on its way (it closed as we did): wait a
	// little for it before taking the peer for still sending.
	complete := err == nil && s.waitFor(time.Second, s.r.complete)
	if err == nil && complete {
		// Both streams arrived whole: say so (the final ack, written
		// before Close returns, in case the process then exits), and
		// stop once the peer said so too. Until then the peer may not
		// know that its stream arrived: if the link is down meanwhile,
		// wait for it to come back (or fail), lest the peer redial an
		// end that is gone and fail its close. A peer that says nothing
		// for finalWait while connected is given up on.
		s.r.finish()
		s.waitLinked(finalWait, linger, func() bool { return s.w.flushed(true) })
		go func() {
			s.waitLinked(finalWait, linger, func() bool { return s.w.flushed(true) && s.r.quiet() })
			s.stop(nil)
			if stopped != nil {
				stopped()
			}
		}()
		return werr
	}
	if err == nil && !complete && s.failure() == nil {
		// The peer is still sending: tell it the link is gone, rather
		// than let it wait to resume.
		st := s.r.Stats()
		s.w.abortAll(fmt.Sprintf("the peer closed the link having read %d bytes, before the end", st.Delivered))
	}
	s.stop(err)
	if stopped != nil {
		stopped()
	}
	if err == nil {
		err = werr
	}
	return err
}

// finalWait bounds how long a closing session, connected, waits for the
// peer's final ack once it sent its own.
const finalWait = 5 * time.Second

// stop tears the session down: no more redials, every connection closed,
// every goroutine returned. Unless the peer acknowledged the whole
// stream, the Writer fails with why (err, or ErrClosed).
func (s *session) stop(err error) {
	if err == nil {
		err = ErrClosed
	}
	s.mu.Lock()
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	live := s.live
	s.live = nil
	s.signalLocked()
	s.mu.Unlock()
	s.cancel()
	s.w.halt(err)
	for _, d := range live {
		_ = d.c.Close()
	}
	s.w.wg.Wait()
	s.r.Close()
	s.wg.Wait()
}
