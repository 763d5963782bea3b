package link

import (
	"errors"
	"fmt"
	"net"
	"os"
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
// # Compression
//
// With Config.Compression set, Write also hands each block to compress to
// a pool of GOMAXPROCS compression workers as it queues it. The workers
// compress blocks while the connections send earlier ones; a connection
// that takes a block from the queue waits for its worker to be done with
// it (usually long done: the queue is many blocks deep). So compression
// runs alongside sending, on every core, whatever the number of
// connections, and the queue stays the one ordered queue the Reader's
// progress argument needs (see Reader): each connection still sends its
// blocks in increasing offset order, taken in order, and a block taken
// is sent as soon as a worker (which waits for nothing) is done with it.
// Compressing in the connections' goroutines instead would stall a
// connection while it compresses and tie the parallelism to the number of
// connections; a separate stage feeding the queue would need its own
// reordering. Each queued block also keeps room for its compressed form
// (blocks and their buffers are reused).
//
// A block that does not shrink by at least 1/64 goes as it is. With
// CompressAuto, Write chooses per block between no compression (the block
// skips the workers), S2 and zstd: the one expected to move the most
// stream bytes per second, from the rate the connections carry (measured
// while they always had a block to send), each codec's measured speed per
// worker and recent ratio, and the rate the Writer recently reached with
// a codec. So that it notices when the data changes, a worker compresses
// a 64 KiB sample of a block now and then with each codec not in use
// (every 16th block, at most every 50ms, unless the workers are busy),
// and at once when the ratio of the codec in use jumps. See
// compress_auto.go for the rule.
//
// Write and Close are not meant to be called concurrently with each other;
// AddStream, RemoveStream, Abort and Stats may be called any time.
type Writer struct {
	cfg   Config
	queue chan *outBlock

	dmu     sync.Mutex // guards the write deadline
	expired chan struct{}
	dtimer  *time.Timer

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

	pool      sync.Pool      // *outBlock, their buffers reused
	work      chan *outBlock // to the compression workers; nil without compression
	auto      *auto          // CompressAuto's estimates and choice
	trials    chan *trial    // samples for the workers to try codecs on
	trialPool sync.Pool      // *trial

	wrote    atomic.Int64 // stream bytes sent
	wire     atomic.Int64 // data payload bytes sent
	codecs   [numCodecs]atomic.Int64
	starved  atomic.Int64 // ns the connections waited for a block, summed
	blocked  atomic.Int64 // ns Write waited for room
	winWait  atomic.Int64 // resumable: ns Write waited for room in the window
	nstreams atomic.Int64 // connections sending

	resumable // nil hooks unless the link is resumable (writer_resume.go)
}

// outBlock is a data block on its way out.
type outBlock struct {
	off   uint64
	raw   []byte        // the stream's bytes
	wire  []byte        // what goes on the wire: raw, or a payload in buf
	codec codec         // how wire is compressed
	want  codec         // how to compress it; codecNone: no worker takes it
	buf   []byte        // room for a compressed payload
	ready chan struct{} // a worker is done with a block it took

	stream *wstream  // resumable: the connection that took it last (under Writer.mu)
	sends  int       // resumable: connections holding it to send (under Writer.mu)
	acked  bool      // resumable: the peer acknowledged it (under Writer.mu)
	sentAt time.Time // resumable: when a connection took it last (under Writer.mu)
}

func (b *outBlock) end() uint64 { return b.off + uint64(len(b.raw)) }

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
	wire     atomic.Int64

	wmu       sendLock      // serializes the blocks written on c (data and acks)
	gone      bool          // resumable: the connection died (under Writer.mu)
	lost      chan struct{} // resumable: closed when it does
	endSent   bool          // resumable: its end block is sent (under Writer.mu)
	finalSent bool          // resumable: the final ack went on it (under Writer.mu)
}

// NewWriter returns a Writer sending over conns (possibly none yet: see
// AddStream). The Writer owns the connections and closes them.
func NewWriter(cfg Config, conns ...net.Conn) *Writer {
	cfg = cfg.withDefaults()
	w := &Writer{cfg: cfg, queue: make(chan *outBlock, max(1, cfg.SendQueue/cfg.BlockSize)), dead: make(chan struct{})}
	w.startCompression()
	w.startResume()
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
	if w.closed && w.hooks == nil || w.stopped {
		return ErrClosed
	}
	s := &wstream{id: w.nextID, name: streamName(w.nextID, c), c: c, retire: make(chan struct{}), done: make(chan struct{}), lost: make(chan struct{}), wmu: make(sendLock, 1)}
	w.nextID++
	w.streams = append(w.streams, s)
	w.ackSent = 0 // the latest ack goes again: the last may have died with a connection
	w.signalLocked()
	w.wg.Add(1)
	w.nstreams.Add(1)
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
	// What it sent is read before its retire block, unless the
	// connection breaks first: resent, it costs a duplicate at worst.
	w.requeueLocked(s)
	serr := s.err
	w.mu.Unlock()
	if serr != nil {
		return serr
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
		// The deadline bounds the wait for room for a block; once the
		// first stage has taken a block, it is sent.
		expired := w.expiry()
		b := w.newBlock(w.off, p[:k])
		first := w.queue
		if b.want != codecNone {
			first = w.work
		}
		if w.hooks != nil {
			switch w.keep(b, expired) {
			case putExpired:
				w.pool.Put(b)
				return n, os.ErrDeadlineExceeded
			case putDead:
				return n, w.failure()
			}
		}
		switch w.put(first, b, expired) {
		case putExpired:
			w.unkeep(b)
			w.pool.Put(b)
			return n, os.ErrDeadlineExceeded
		case putDead:
			return n, w.failure()
		}
		if first != w.queue && w.put(w.queue, b, nil) != putDone {
			return n, w.failure()
		}
		w.off += uint64(k)
		n += k
		p = p[k:]
	}
	return n, nil
}

// SetWriteDeadline makes Write fail with os.ErrDeadlineExceeded once it
// has waited for room until t (never, for the zero t), as net.Conn's does.
func (w *Writer) SetWriteDeadline(t time.Time) error {
	w.dmu.Lock()
	defer w.dmu.Unlock()
	if w.dtimer != nil {
		w.dtimer.Stop()
	}
	w.expired, w.dtimer = nil, nil
	if t.IsZero() {
		return nil
	}
	ch := make(chan struct{})
	w.expired = ch
	w.dtimer = time.AfterFunc(time.Until(t), func() { close(ch) })
	return nil
}

// expiry returns a channel closed at the write deadline (nil: none).
func (w *Writer) expiry() <-chan struct{} {
	w.dmu.Lock()
	defer w.dmu.Unlock()
	return w.expired
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
	if w.work != nil {
		close(w.work)
	}
	w.wmu.Unlock()
	if w.hooks != nil {
		// The session waits for the peer's acks and closes the
		// connections (resume.go).
		w.setTotal()
		return w.failure()
	}

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
	defer w.nstreams.Add(-1)
	for {
		b, ev := w.take(s)
		switch ev {
		case takeDead:
			w.sendAbort(s)
			return
		case takeRetire:
			w.check(s, s.send(Header{Kind: KindRetire}, nil))
			return
		case takeEnd:
			if !w.check(s, s.send(Header{Kind: KindEnd, Offset: w.total}, nil)) || w.hooks == nil {
				return
			}
			w.mu.Lock()
			s.endSent = true // resumable: it stays for blocks to resend
			w.signalLocked()
			w.mu.Unlock()
			continue
		case takeLost, takeFinished:
			return
		}
		if !w.check(s, s.send(Header{Kind: KindData, Flags: b.codec.flag(), Offset: b.off}, b.wire)) {
			if w.hooks != nil {
				w.sent(b)
			}
			return
		}
		s.blocks.Add(1)
		s.bytes.Add(int64(len(b.raw)))
		s.wire.Add(int64(len(b.wire)))
		w.wrote.Add(int64(len(b.raw)))
		w.wire.Add(int64(len(b.wire)))
		w.codecs[b.codec].Add(1)
		if w.hooks == nil {
			w.pool.Put(b)
		} else {
			w.sent(b) // kept until acknowledged
		}
	}
}

type takeEvent int

const (
	takeBlock    takeEvent = iota
	takeEnd                // the queue is closed and empty: the stream ends
	takeRetire             // s is retired
	takeDead               // the Writer failed
	takeLost               // resumable: s died
	takeFinished           // resumable: the peer acknowledged the whole stream
)

// take returns the next block for s to send, ready to go, or what else
// happened. A retirement or failure goes before the blocks still queued.
// The time s waits for a block counts as starved.
func (w *Writer) take(s *wstream) (*outBlock, takeEvent) {
	if w.hooks != nil {
		return w.takeResumable(s)
	}
	select {
	case <-w.dead:
		return nil, takeDead
	case <-s.retire:
		return nil, takeRetire
	default:
	}
	var b *outBlock
	ok := true
	select {
	case b, ok = <-w.queue:
	default:
		start := time.Now()
		select {
		case b, ok = <-w.queue:
		case <-s.retire:
			return nil, takeRetire
		case <-w.dead:
			return nil, takeDead
		}
		w.starved.Add(int64(time.Since(start)))
	}
	if !ok {
		return nil, takeEnd
	}
	if b.want == codecNone {
		return b, takeBlock
	}
	select {
	case <-b.ready:
	default:
		start := time.Now()
		select {
		case <-b.ready:
		case <-w.dead:
			return nil, takeDead
		}
		w.starved.Add(int64(time.Since(start)))
	}
	return b, takeBlock
}

// check records a failed send on s and fails the Writer; it reports
// whether err is nil.
func (w *Writer) check(s *wstream, err error) bool {
	if err == nil {
		return true
	}
	if w.hooks != nil {
		// not the link's failure: it resends elsewhere
		w.lose(s, err)
		w.hooks.lost(s.c, err, true)
		return false
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
	s.wmu.Lock()
	_, err := bufs.WriteTo(s.c)
	s.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("link: %s: sending %s: %w", s.name, h, err)
	}
	return nil
}
