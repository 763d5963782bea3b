package link

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by a Writer or Reader used after Close.
var ErrClosed = errors.New("link: closed")

// Writer sends one byte stream striped over its connections. Write cuts
// what it is given into blocks of at most Config.BlockSize and puts them
// on a queue of at most Config.SendQueue bytes; one goroutine per
// connection takes the next block from the queue whenever its connection
// has sent the previous one, so a fast connection carries more blocks and
// a slow one fewer. Write blocks while the queue is full: that is the
// backpressure of the slowest receiver or network.
//
// Write and Close are not meant to be called concurrently with each other;
// AddStream, RemoveStream, Abort and Stats may be called any time.
type Writer struct {
	cfg   Config
	queue chan outBlock

	wmu     sync.Mutex // serializes Write and Close
	off     uint64     // offset of the next byte written
	closing bool
	total   uint64 // set before queue is closed: the stream's length

	mu      sync.Mutex
	streams []*wstream
	nextID  int
	closed  bool // no more streams: Close is waiting for them
	err     error
	reason  string // sent in abort blocks
	dead    chan struct{}
	wg      sync.WaitGroup
	wrote   atomic.Int64
}

type outBlock struct {
	off uint64
	p   []byte
}

type wstream struct {
	id       int
	name     string
	c        net.Conn
	retire   chan struct{}
	retiring bool // under Writer.mu
	done     chan struct{}
	err      error // set before done is closed
	blocks   atomic.Int64
	bytes    atomic.Int64
}

// NewWriter returns a Writer sending over conns (possibly none yet: see
// AddStream). The Writer owns the connections and closes them.
func NewWriter(cfg Config, conns ...net.Conn) *Writer {
	cfg = cfg.withDefaults()
	w := &Writer{cfg: cfg, queue: make(chan outBlock, max(1, cfg.SendQueue/cfg.BlockSize)), dead: make(chan struct{})}
	for _, c := range conns {
		_ = w.AddStream(c)
	}
	return w
}

// AddStream starts sending blocks over c too. It fails once Close has
// begun.
func (w *Writer) AddStream(c net.Conn) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	s := &wstream{id: w.nextID, name: streamName(w.nextID, c), c: c, retire: make(chan struct{}), done: make(chan struct{})}
	w.nextID++
	w.streams = append(w.streams, s)
	w.wg.Add(1)
	go w.run(s)
	return nil
}

// RemoveStream retires c: its goroutine finishes the block it is sending,
// sends a retire block, and c is closed. It returns once that is done. The
// last stream cannot be removed (the rest of the stream could not be sent).
func (w *Writer) RemoveStream(c net.Conn) error {
	w.mu.Lock()
	var s *wstream
	live := 0
	for _, t := range w.streams {
		if t.c == c {
			s = t
		}
		if !t.retiring {
			live++
		}
	}
	switch {
	case s == nil:
		w.mu.Unlock()
		return errors.New("link: not a stream of this writer")
	case s.retiring:
		w.mu.Unlock()
		return fmt.Errorf("link: %s is already being removed", s.name)
	case live < 2:
		w.mu.Unlock()
		return fmt.Errorf("link: %s is the last stream", s.name)
	}
	s.retiring = true
	close(s.retire)
	w.mu.Unlock()
	<-s.done
	cerr := c.Close()
	w.mu.Lock()
	for i, t := range w.streams {
		if t == s {
			w.streams = append(w.streams[:i], w.streams[i+1:]...)
			break
		}
	}
	w.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	return cerr
}

// Write queues p to be sent, blocking while the queue is full. It fails
// once a connection has failed or the Writer was aborted.
func (w *Writer) Write(p []byte) (int, error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.closing {
		return 0, ErrClosed
	}
	n := 0
	for len(p) > 0 {
		if err := w.failure(); err != nil {
			return n, err
		}
		k := min(len(p), w.cfg.BlockSize)
		b := outBlock{off: w.off, p: append([]byte(nil), p[:k]...)}
		select {
		case w.queue <- b:
		case <-w.dead:
			return n, w.failure()
		}
		w.off += uint64(k)
		n += k
		p = p[k:]
	}
	return n, nil
}

// Close sends what is queued, then an end block with the stream's total
// length on every connection, and closes them. It returns the first
// failure of any connection, or an error if there was no connection to
// send the end on.
func (w *Writer) Close() error {
	w.wmu.Lock()
	if w.closing {
		w.wmu.Unlock()
		return ErrClosed
	}
	w.closing = true
	w.total = w.off
	close(w.queue)
	w.wmu.Unlock()

	w.mu.Lock()
	w.closed = true
	none := len(w.streams) == 0
	w.mu.Unlock()
	w.wg.Wait()
	w.closeConns()
	if err := w.failure(); err != nil {
		return err
	}
	if none {
		return errors.New("link: closed without any stream to send the end on")
	}
	return nil
}

// Abort gives up: every connection sends an abort block with reason (for
// at most Config.AbortTimeout) and is closed. The Reader's Read then fails
// with an error wrapping ErrAborted. Close after Abort returns the abort.
func (w *Writer) Abort(reason string) {
	w.fail(fmt.Errorf("%w: %s", ErrAborted, reason), reason)
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.wg.Wait()
	w.closeConns()
}

func (w *Writer) closeConns() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.streams {
		_ = s.c.Close()
	}
}

func (w *Writer) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// fail records the Writer's first failure and makes every connection give
// up within AbortTimeout.
func (w *Writer) fail(err error, reason string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return
	}
	w.err, w.reason = err, reason
	if len(w.reason) > MaxReason {
		w.reason = w.reason[:MaxReason]
	}
	close(w.dead)
	deadline := time.Now().Add(w.cfg.AbortTimeout)
	for _, s := range w.streams {
		_ = s.c.SetWriteDeadline(deadline)
	}
}

// run sends blocks on s until the stream ends, s is retired, or the
// Writer fails.
func (w *Writer) run(s *wstream) {
	defer w.wg.Done()
	defer close(s.done)
	for {
		select {
		case <-w.dead:
			w.sendAbort(s)
			return
		default:
		}
		select {
		case b, ok := <-w.queue:
			if !ok {
				w.check(s, s.send(Header{Kind: KindEnd, Offset: w.total}, nil))
				return
			}
			if !w.check(s, s.send(Header{Kind: KindData, Offset: b.off}, b.p)) {
				return
			}
			s.blocks.Add(1)
			s.bytes.Add(int64(len(b.p)))
			w.wrote.Add(int64(len(b.p)))
		case <-s.retire:
			w.check(s, s.send(Header{Kind: KindRetire}, nil))
			return
		case <-w.dead:
			w.sendAbort(s)
			return
		}
	}
}

// check records a failed send on s and fails the Writer; it reports
// whether err is nil.
func (w *Writer) check(s *wstream, err error) bool {
	if err == nil {
		return true
	}
	s.err = err
	w.fail(err, err.Error())
	return false
}

func (w *Writer) sendAbort(s *wstream) {
	w.mu.Lock()
	reason := w.reason
	w.mu.Unlock()
	_ = s.c.SetWriteDeadline(time.Now().Add(w.cfg.AbortTimeout))
	_ = s.send(Header{Kind: KindEnd, Flags: FlagAbort}, []byte(reason))
}

// send writes one block; a failure fails the Writer.
func (s *wstream) send(h Header, p []byte) error {
	h.Length = uint32(len(p))
	var hdr [HeaderSize]byte
	h.Put(hdr[:])
	bufs := net.Buffers{hdr[:]}
	if len(p) > 0 { // net.Pipe sends even an empty Write as a message
		bufs = append(bufs, p)
	}
	if _, err := bufs.WriteTo(s.c); err != nil {
		return fmt.Errorf("link: %s: sending %s: %w", s.name, h, err)
	}
	return nil
}
