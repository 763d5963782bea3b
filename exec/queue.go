package exec

import (
	"fmt"
	"sync"
)

// stdinQueue holds stdin frames the caller sent and the command has not
// taken yet: at most Window bytes, which the credit the service grants
// guarantees for a caller that keeps to the protocol.
type stdinQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	bufs   [][]byte
	held   int // bytes queued or being written, not yet credited back
	eof    bool
	closed bool
}

func newStdinQueue() *stdinQueue {
	q := &stdinQueue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// push queues b, or says how the caller broke the protocol.
func (q *stdinQueue) push(b []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil // the command is done: what the caller still sends is dropped
	}
	if q.eof {
		return &ProtocolError{Type: FrameStdin, Msg: "stdin after its end"}
	}
	if q.held+len(b) > Window {
		return &ProtocolError{Type: FrameStdin, Msg: fmt.Sprintf("%d bytes beyond the credit granted (%d held of %d)", len(b), q.held, Window)}
	}
	q.held += len(b)
	q.bufs = append(q.bufs, b)
	q.cond.Signal()
	return nil
}

// end marks stdin's end, after what is queued.
func (q *stdinQueue) end() {
	q.mu.Lock()
	q.eof = true
	q.cond.Signal()
	q.mu.Unlock()
}

// close drops what is queued and ends pop.
func (q *stdinQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.bufs = nil
	q.cond.Broadcast()
	q.mu.Unlock()
}

// pop waits for the next frame's bytes, or the end (eof), or close (!ok).
func (q *stdinQueue) pop() (b []byte, eof, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.bufs) == 0 && !q.eof && !q.closed {
		q.cond.Wait()
	}
	switch {
	case q.closed:
		return nil, false, false
	case len(q.bufs) > 0:
		b = q.bufs[0]
		q.bufs[0] = nil
		q.bufs = q.bufs[1:]
		return b, false, true
	}
	return nil, true, true
}

// taken credits n bytes back: the command took them.
func (q *stdinQueue) taken(n int) {
	q.mu.Lock()
	q.held -= n
	q.mu.Unlock()
}

// empty says whether nothing is queued now.
func (q *stdinQueue) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.bufs) == 0
}

// stdinBufs are the buffers stdin frames are read into (MaxData bytes
// each): the command takes a frame, and its buffer serves a later one,
// instead of a new buffer allocated and zeroed for every frame.
var stdinBufs = sync.Pool{New: func() any { b := make([]byte, MaxData); return &b }}

// stdinBuf is a buffer for a stdin frame's n bytes (readFrame's buf).
func stdinBuf(n int) []byte { return (*stdinBufs.Get().(*[]byte))[:n] }

// putStdinBuf gives a frame's buffer back once the command took it.
func putStdinBuf(b []byte) {
	if cap(b) == MaxData {
		b = b[:MaxData]
		stdinBufs.Put(&b)
	}
}
