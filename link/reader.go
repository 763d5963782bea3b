package link

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// ErrAborted is wrapped by the error a Reader returns when the sender
// aborted the stream (Writer.Abort, or a Writer whose connection failed).
var ErrAborted = errors.New("link: stream aborted by the sender")

// Reader receives one byte stream striped over its connections: one
// goroutine per connection reads blocks and hands them to a reorder buffer,
// and Read returns the bytes in order.
//
// Read returns io.EOF only once every byte up to the total length that the
// end blocks announce has been returned. A connection that fails or ends
// without an end or retire block while bytes are missing fails the Reader:
// Read returns an error naming the connection (wrapping
// io.ErrUnexpectedEOF or the connection's error), never a short stream.
// Blocks that break the protocol fail it with an error wrapping ErrBlock;
// an abort from the sender with one wrapping ErrAborted. After a failure
// Read returns the error at once, dropping what it holds.
//
// # Memory and backpressure
//
// The Reader holds at most Config.ReorderBuffer bytes of blocks (each
// counted as its decoded payload plus BlockCost), received and not yet
// read. A connection's goroutine reads a block's header (and a compressed
// block's decoded length), then waits for room before it reads the
// payload, so a full buffer stops reading from the connections, and TCP
// flow control stops their senders. Besides, a goroutine decoding a
// compressed block holds its compressed bytes (fewer than the decoded
// ones, from a shared pool) until it is decoded: decoding runs in the
// connections' goroutines, in parallel across connections.
//
// The last MaxBlock+BlockCost bytes of the buffer are kept for the block
// the stream needs next (its offset is the first byte not yet received):
// any other block is admitted only while the buffer holds at most
// ReorderBuffer-MaxBlock-BlockCost. So when a slow connection carries the
// next block and the fast ones have filled the buffer with later blocks,
// the fast ones wait, and the next block still fits. It is on the wire or
// still queued at the sender: a Writer sends each connection's blocks in
// increasing offset order, taken in order from one queue, so the next
// block is either the first unread block of its connection, which its
// goroutine reads, or not yet taken, and then no later block is held
// either and every connection is free to take it. The stream thus moves at
// the pace of its slowest connection at worst, within the bound; it never
// stalls while the application reads.
type Reader struct {
	cfg  Config
	mu   sync.Mutex
	cond sync.Cond // broadcast on every change of the fields below
	wg   sync.WaitGroup

	streams  []*rstream
	nextID   int
	closed   bool
	deadline time.Time   // of Read; zero: none
	timer    *time.Timer // wakes Read at the deadline
	err      error

	pending    []*rblock // blocks received and not fully read, by offset
	readOff    uint64    // bytes returned by Read
	next       uint64    // every byte below next has been received
	total      uint64
	haveTotal  bool
	totalFrom  string // the stream that announced the total
	buffered   int    // held or reserved, counted against bound
	bound      int    // Config.ReorderBuffer, raised with the connections
	maxBuf     int
	received   int64       // stream bytes
	wire       int64       // payload bytes as on the wire
	blocks     CodecBlocks // data blocks by codec
	lostStream string      // a stream lost after the data was complete, for Stats

	hooks    *resumeHooks // resumable (reader_resume.go); nil otherwise
	ackedTo  uint64       // resumable: the last ack asked for
	freed    int          // resumable: bytes (as counted) read since
	final    bool         // resumable: the final ack was asked for
	peerDone bool         // resumable: a final ack of the peer's came
	dups     int64        // resumable: duplicate blocks dropped
	dupBytes int64
	reading  map[uint64]int // resumable: blocks being read, by offset
	twins    int            // resumable: room reserved for second copies
	maxTwins int
}

type rstream struct {
	id   int
	name string
	c    net.Conn
	last uint64 // end of its last data block: offsets increase per stream

	ended bool // resumable: the peer's end block came on it
	final bool // resumable: the peer's final ack came on it
}

// NewReader returns a Reader receiving over conns (possibly none yet: see
// AddStream). The Reader owns the connections and closes them.
func NewReader(cfg Config, conns ...net.Conn) *Reader {
	r := &Reader{cfg: cfg.withDefaults()}
	r.bound = r.cfg.ReorderBuffer
	if r.hooks = r.cfg.resume; r.hooks != nil {
		r.bound = r.hooks.window // the peer's Writer keeps no more
	}
	r.cond.L = &r.mu
	for _, c := range conns {
		_ = r.AddStream(c)
	}
	return r
}

// AddStream starts reading blocks from c too. It fails after Close.
func (r *Reader) AddStream(c net.Conn) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	s := &rstream{id: r.nextID, name: streamName(r.nextID, c), c: c}
	r.nextID++
	r.streams = append(r.streams, s)
	if r.hooks == nil {
		r.bound = max(r.bound, len(r.streams)*ReorderPerStream) // never lowered: what was admitted stays admitted
	}
	r.wg.Add(1)
	go r.run(s)
	return nil
}

// Read reads the stream's next bytes, in order.
func (r *Reader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.haveTotal && r.readOff == r.total {
			r.acknowledge()
			return 0, io.EOF
		}
		if r.err != nil {
			return 0, r.err
		}
		if !r.deadline.IsZero() && !time.Now().Before(r.deadline) {
			return 0, os.ErrDeadlineExceeded
		}
		n := 0
		for len(r.pending) > 0 && n < len(p) {
			b := r.pending[0]
			if b.off+uint64(b.r) != r.readOff {
				break
			}
			k := copy(p[n:], b.p[b.r:])
			n += k
			b.r += k
			r.readOff += uint64(k)
			if b.r == len(b.p) {
				recycle(b.p)
				r.pending[0] = nil
				r.pending = r.pending[1:]
				r.buffered -= len(b.p) + BlockCost
				r.freed += len(b.p) + BlockCost
			}
		}
		if n > 0 {
			r.acknowledge()
		}
		if n > 0 || len(p) == 0 {
			r.cond.Broadcast()
			return n, nil
		}
		r.cond.Wait()
	}
}

// SetReadDeadline makes Read fail with os.ErrDeadlineExceeded from t on
// (never, for the zero t), as net.Conn's does.
func (r *Reader) SetReadDeadline(t time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deadline = t
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	if !t.IsZero() {
		r.timer = time.AfterFunc(time.Until(t), func() {
			r.mu.Lock()
			r.cond.Broadcast()
			r.mu.Unlock()
		})
	}
	r.cond.Broadcast()
	return nil
}

// awaitEnds waits up to d for the last block of every connection, once
// every byte of the stream has arrived, and reports whether they all came.
// A link closing after its peer's end waits for them so that it never
// closes a connection with bytes unread: that would reset it, destroying
// what it still had to send.
func (r *Reader) awaitEnds(d time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.haveTotal || r.next != r.total {
		return len(r.streams) == 0
	}
	t := time.AfterFunc(d, func() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer t.Stop()
	deadline := time.Now().Add(d)
	for len(r.streams) > 0 && r.err == nil && time.Now().Before(deadline) {
		r.cond.Wait()
	}
	return len(r.streams) == 0
}

// Close closes every connection and stops the Reader; Read then returns
// ErrClosed (or io.EOF if the stream was complete).
func (r *Reader) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	if r.err == nil {
		r.err = ErrClosed
	}
	for _, s := range r.streams {
		_ = s.c.Close()
	}
	r.cond.Broadcast()
	r.mu.Unlock()
	r.wg.Wait()
	return nil
}

// run reads blocks from s until its end or retire block, or a failure.
func (r *Reader) run(s *rstream) {
	defer r.wg.Done()
	defer r.remove(s)
	var hdr [HeaderSize]byte
	for {
		if _, err := io.ReadFull(s.c, hdr[:]); err != nil {
			r.lost(s, err)
			return
		}
		h, err := ParseHeader(hdr[:])
		if err != nil {
			r.fail(fmt.Errorf("%w (on %s)", err, s.name))
			return
		}
		switch h.Kind {
		case KindData:
			if !r.readData(s, h) {
				return
			}
		case KindEnd:
			reason := make([]byte, h.Length)
			if _, err := io.ReadFull(s.c, reason); err != nil {
				r.lost(s, err)
				return
			}
			r.end(s, h, string(reason))
			if r.hooks != nil && h.Flags&FlagAbort != 0 {
				r.hooks.aborted(r.failure())
			}
			if r.hooks == nil || h.Flags&FlagAbort != 0 {
				return
			}
			// resumable: acks and blocks to resend may follow
		case KindAck:
			if !r.acked(s, h) {
				return
			}
		case KindRetire:
			if r.cfg.Retired != nil {
				r.cfg.Retired(s.c)
			}
			return
		}
	}
}

// remove forgets a stream that has ended one way or another and closes
// its connection. A Reader left without streams waits for AddStream (the
// caller may not have added all the sender's connections yet): giving up
// is the caller's choice, by Close.
func (r *Reader) remove(s *rstream) {
	_ = s.c.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, t := range r.streams {
		if t == s {
			r.streams = append(r.streams[:i], r.streams[i+1:]...)
			break
		}
	}
	r.cond.Broadcast()
}

// lost handles a stream that failed or ended without an end block.
func (r *Reader) lost(s *rstream, err error) {
	if r.hooks != nil {
		// resumable: not the stream's loss; the session tells the
		// Writer, which sends its blocks again elsewhere
		r.mu.Lock()
		over := r.closed || r.err != nil
		r.mu.Unlock()
		if !over {
			r.hooks.lost(s.c, err, false)
		}
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.err != nil {
		return
	}
	if r.haveTotal && r.next == r.total {
		r.lostStream = s.name // nothing was missing: not the stream's loss
		return
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	of := "an unknown number of"
	if r.haveTotal {
		of = fmt.Sprint(r.total)
	}
	r.failLocked(fmt.Errorf("link: %s broke before the end of the stream (%d of %s bytes received in order): %w", s.name, r.next, of, err))
}

func (r *Reader) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *Reader) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failLocked(err)
}

func (r *Reader) failLocked(err error) {
	if r.err == nil {
		r.err = err
		for _, b := range r.pending {
			r.buffered -= len(b.p) + BlockCost
		}
		r.pending = nil
	}
	r.cond.Broadcast()
}
