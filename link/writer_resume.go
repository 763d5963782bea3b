package link

import (
	"fmt"
	"slices"
	"time"
)

// A resumable Writer (its Config set up by a session, resume.go) keeps
// every block from Write until the peer acknowledges it, and a connection
// that dies does not fail it: the blocks that connection took and the peer
// has not acknowledged go on a resend list, which the connections left (or
// joining later) take from before the queue. Write waits while the blocks
// kept, counted as the Reader counts them (stream bytes plus BlockCost),
// would exceed the window: 16 MiB at first, growing up to
// Config.ResendBuffer as agreed while it holds the link back (growLocked).
// Acknowledged blocks are reused once no connection is sending them.
//
// Each connection's goroutine sends its end block once the queue is closed
// and empty, then stays, for blocks to resend, until the peer has
// acknowledged the whole stream (or the Writer fails, or it dies). Acks of
// the other direction's stream go out among the blocks (sendAck).

// resumeHooks tie a resumable Writer and Reader to their session.
type resumeHooks struct {
	window int
	// lost: a connection (a half of a duplex, as given to AddStream)
	// died, sending or receiving, with err.
	lost func(c any, err error, sending bool)
	// ack: the Reader delivered off bytes in order (final: all of them,
	// and knows the end).
	ack func(off uint64, final bool)
	// acked: the Reader received the peer's ack of off on a connection.
	acked func(off uint64) error
	// aborted: the peer aborted the link (err says why).
	aborted func(err error)
}

// resumable is a resumable Writer's state, under Writer.mu.
type resumable struct {
	hooks    *resumeHooks
	kept     []*outBlock // written and not acknowledged, by offset
	keptCost int
	maxKept  int
	top      uint64      // the end of the last block kept: bytes written
	acked    uint64      // what the peer acknowledged
	resend   []*outBlock // to send again, by offset
	resent   int64       // blocks sent again
	wake     chan struct{}
	totalSet bool
	finished chan struct{} // closed once acked == total
	stopped  bool          // no more streams
	ackOff   uint64        // the latest ack of the other direction to send
	ackFinal bool
	ackSent  uint64 // the latest sent on some connection
	next     int    // round robin of acks over the connections
	acking   int    // acks being written
	// the window in use, growing (see growLocked) up to hooks.window
	win      int
	epochAt  time.Time     // the start of the window's measuring epoch
	epochOff uint64        // acked then
	epochWW  int64         // winWait then
	minRTT   time.Duration // the least time from a block's send to its ack
	grewRate float64       // the best rate at the window before the last growth (0: none since the window last sufficed)
	epochs   int           // epochs at the window in use
	bestRate float64       // the best rate in them
}

// startWindow is the window a resumable Writer starts with (or the one
// agreed, if smaller); it grows up to the one agreed while the window
// holds the link back (growLocked). A variable for tests.
var startWindow = 16 << 20

// The window's growth: each epoch (at least minEpoch and two round trips
// of a block to its ack, at most maxEpoch) the Writer looks at how long
// Write waited for room in the window. If it waited most of the epoch,
// the window held the link back, and after two epochs at least at its
// size it doubles, up to the window agreed in the hello
// (Config.ResendBuffer: 128 MiB by default), unless it grew already and
// the best rate (bytes acknowledged per second) of the epochs at this
// size is not growFactor times that at the size before: then more room
// would only hold more (a peer that reads slowly, a path that carries no
// more). It does not shrink: the agreed window bounds what the Writer and
// the peer's Reader hold.
const (
	minEpoch   = 100 * time.Millisecond
	maxEpoch   = time.Second
	growFactor = 1.1
)

func (w *Writer) startResume() {
	if w.cfg.resume == nil {
		return
	}
	w.hooks = w.cfg.resume
	w.win = min(w.hooks.window, startWindow)
	w.wake = make(chan struct{})
	w.finished = make(chan struct{})
	w.wg.Add(1)
	go w.acker()
}

// signalLocked wakes whoever waits on the resumable state.
func (w *Writer) signalLocked() {
	if w.hooks == nil {
		return
	}
	close(w.wake)
	w.wake = make(chan struct{})
}

// keep waits until the window has room for b, then keeps it.
func (w *Writer) keep(b *outBlock, expired <-chan struct{}) putResult {
	cost := len(b.raw) + BlockCost
	var start time.Time
	for {
		w.mu.Lock()
		if w.err != nil {
			w.mu.Unlock()
			return putDead
		}
		if len(w.kept) == 0 || w.keptCost+cost <= w.win {
			w.kept = append(w.kept, b)
			w.keptCost += cost
			w.maxKept = max(w.maxKept, w.keptCost)
			w.top = b.end()
			w.mu.Unlock()
			if !start.IsZero() {
				w.blocked.Add(int64(time.Since(start)))
				w.winWait.Add(int64(time.Since(start)))
			}
			return putDone
		}
		wake := w.wake
		w.mu.Unlock()
		if start.IsZero() {
			start = time.Now()
		}
		select {
		case <-wake:
		case <-w.dead:
		case <-expired:
			return putExpired
		}
	}
}

// unkeep drops b, the last block kept, which never reached the queue.
func (w *Writer) unkeep(b *outBlock) {
	if w.hooks == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.kept); n > 0 && w.kept[n-1] == b {
		w.kept = w.kept[:n-1]
		w.keptCost -= len(b.raw) + BlockCost
		w.top = b.off
	}
}

func (w *Writer) setTotal() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.totalSet = true
	w.checkFinishedLocked()
	w.signalLocked()
}

func (w *Writer) checkFinishedLocked() {
	if w.totalSet && w.acked == w.total {
		select {
		case <-w.finished:
		default:
			close(w.finished)
		}
	}
}

// ack takes the peer's ack of off. A lower one than known is stale (acks
// cross on different connections); one beyond what was written breaks the
// protocol.
func (w *Writer) ack(off uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if off > w.top {
		return fmt.Errorf("%w: ack of %d, beyond the %d bytes sent", ErrBlock, off, w.top)
	}
	if off <= w.acked {
		return nil
	}
	w.acked = off
	now := time.Now()
	i := 0
	for ; i < len(w.kept) && w.kept[i].end() <= off; i++ {
		b := w.kept[i]
		if !b.sentAt.IsZero() && b.end() == off {
			if rtt := now.Sub(b.sentAt); w.minRTT == 0 || rtt < w.minRTT {
				w.minRTT = rtt
			}
		}
		w.keptCost -= len(b.raw) + BlockCost
		w.kept[i] = nil
		b.acked = true
		if b.sends == 0 && b.stream != nil {
			// sent, and no connection holds it: reused (a block never
			// taken cannot be acknowledged; one in the resend list is
			// dropped from it below)
			w.pool.Put(b)
		}
	}
	w.kept = w.kept[i:]
	w.resend = slices.DeleteFunc(w.resend, func(b *outBlock) bool { return b.end() <= off })
	w.growLocked(now)
	w.checkFinishedLocked()
	w.signalLocked()
	return nil
}

// growLocked ends the window's measuring epoch if it is over, and grows
// the window if it held the link back (see startWindow).
func (w *Writer) growLocked(now time.Time) {
	if w.epochAt.IsZero() {
		w.epochAt, w.epochOff, w.epochWW = now, w.acked, w.winWait.Load()
		return
	}
	dt := now.Sub(w.epochAt)
	if dt < min(max(minEpoch, 2*w.minRTT), maxEpoch) {
		return
	}
	rate := float64(w.acked-w.epochOff) / dt.Seconds()
	waited := time.Duration(w.winWait.Load() - w.epochWW)
	w.epochs++
	w.bestRate = max(w.bestRate, rate)
	switch {
	case waited < dt/2:
		w.grewRate = 0 // the window sufficed
	case w.epochs >= 2 && w.win < w.hooks.window && (w.grewRate == 0 || w.bestRate > growFactor*w.grewRate):
		// two epochs at least at each size: the first may have begun
		// before the stream (or the last growth) took effect
		w.grewRate = w.bestRate
		w.win = min(2*w.win, w.hooks.window)
		w.epochs, w.bestRate = 0, 0
	}
	w.epochAt, w.epochOff, w.epochWW = now, w.acked, w.winWait.Load()
}

// lose forgets s, which died: what it took and the peer has not
// acknowledged goes on the resend list.
func (w *Writer) lose(s *wstream, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.gone {
		return
	}
	s.gone = true
	if s.err == nil {
		s.err = err
	}
	close(s.lost)
	w.ackSent = 0 // the last ack may have gone on s: it goes again on another
	for i, t := range w.streams {
		if t == s {
			w.streams = append(w.streams[:i], w.streams[i+1:]...)
			break
		}
	}
	w.requeueLocked(s)
}

// loseConn is lose for the stream on c, as the session names it.
func (w *Writer) loseConn(c any, err error) {
	w.mu.Lock()
	var s *wstream
	for _, t := range w.streams {
		if any(t.c) == c {
			s = t
		}
	}
	w.mu.Unlock()
	if s != nil {
		w.lose(s, err)
	}
}

// requeueLocked puts the blocks s took and the peer has not acknowledged
// on the resend list.
func (w *Writer) requeueLocked(s *wstream) {
	if w.hooks == nil {
		return
	}
	for _, b := range w.kept {
		if b.stream == s {
			b.stream = nil
			w.resendLocked(b)
		}
	}
	w.signalLocked()
}

func (w *Writer) resendLocked(b *outBlock) {
	i, _ := slices.BinarySearchFunc(w.resend, b.off, func(x *outBlock, off uint64) int {
		switch {
		case x.off < off:
			return -1
		case x.off > off:
			return 1
		}
		return 0
	})
	w.resend = slices.Insert(w.resend, i, b)
}

// takeResumable is take for a resumable Writer: blocks to resend first,
// then the queue; once the queue is closed and empty, the end (once);
// then blocks to resend until the peer has acknowledged everything.
func (w *Writer) takeResumable(s *wstream) (*outBlock, takeEvent) {
	for {
		w.mu.Lock()
		switch {
		case w.err != nil:
			w.mu.Unlock()
			return nil, takeDead
		case s.gone:
			w.mu.Unlock()
			return nil, takeLost
		case s.retiring:
			w.mu.Unlock()
			return nil, takeRetire
		}
		if len(w.resend) > 0 {
			b := w.resend[0]
			w.resend = w.resend[1:]
			w.resent++
			b.sends++
			w.mu.Unlock()
			if ev := w.claim(s, b); ev != takeBlock {
				return nil, ev
			}
			return b, takeBlock
		}
		if s.endSent && w.isFinished() {
			w.mu.Unlock()
			return nil, takeFinished
		}
		wake := w.wake
		var queue chan *outBlock
		if !s.endSent {
			queue = w.queue
		}
		w.mu.Unlock()
		start := time.Now()
		select {
		case b, ok := <-queue:
			w.starved.Add(int64(time.Since(start)))
			if !ok {
				return nil, takeEnd
			}
			w.mu.Lock()
			b.sends++
			w.mu.Unlock()
			if ev := w.claim(s, b); ev != takeBlock {
				return nil, ev
			}
			return b, takeBlock
		case <-wake:
		case <-s.lost:
		case <-s.retire:
		case <-w.dead:
		}
	}
}

func (w *Writer) isFinished() bool {
	select {
	case <-w.finished:
		return true
	default:
		return false
	}
}

// claim makes b, which s holds (b.sends counts it), s's to send, once
// its worker is done with it. If s dies first, b goes back for another.
func (w *Writer) claim(s *wstream, b *outBlock) takeEvent {
	if b.want != codecNone {
		select {
		case <-b.ready:
			b.want = codecNone // compressed once for all its sends
		case <-w.dead:
			w.sent(b)
			return takeDead
		case <-s.lost:
			w.mu.Lock()
			b.sends--
			w.resendLocked(b)
			w.signalLocked()
			w.mu.Unlock()
			return takeLost
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.gone {
		b.sends--
		if !b.acked {
			w.resendLocked(b)
			w.signalLocked()
		}
		return takeLost
	}
	b.stream = s
	b.sentAt = time.Now()
	return takeBlock
}

// sent says a connection holds b no more; an acknowledged block is then
// reused.
func (w *Writer) sent(b *outBlock) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b.sends--
	if b.acked && b.sends == 0 {
		w.pool.Put(b)
	}
}

// sendAck has the latest ack of the other direction sent: on one
// connection, or with final on every one (and on those added later).
func (w *Writer) sendAck(off uint64, final bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if off > w.ackOff {
		w.ackOff = off
	}
	w.ackFinal = w.ackFinal || final
	w.signalLocked()
}

// acker sends the acks sendAck asks for, between blocks, until the
// Writer stops.
func (w *Writer) acker() {
	defer w.wg.Done()
	for {
		w.mu.Lock()
		if w.stopped || w.err != nil {
			w.mu.Unlock()
			return
		}
		var to []*wstream
		h := Header{Kind: KindAck, Offset: w.ackOff}
		switch {
		case w.ackFinal:
			h.Flags = FlagFinal
			for _, s := range w.streams {
				if !s.finalSent && !s.retiring {
					s.finalSent = true
					to = append(to, s)
				}
			}
		case w.ackOff > w.ackSent && len(w.streams) > 0:
			// the connection least busy, starting after the last one used
			w.next++
			for i := range w.streams {
				s := w.streams[(w.next+i)%len(w.streams)]
				if s.retiring {
					continue
				}
				if to == nil {
					to = []*wstream{s}
				}
				if s.wmu.TryLock() {
					s.wmu.Unlock()
					to[0] = s
					break
				}
			}
		}
		if len(to) > 0 {
			w.ackSent = w.ackOff
			w.acking++
		}
		wake := w.wake
		w.mu.Unlock()
		if len(to) == 0 {
			<-wake
			continue
		}
		for _, s := range to {
			if err := s.send(h, nil); err != nil {
				w.lose(s, err)
				w.hooks.lost(s.c, err, true)
			}
		}
		w.mu.Lock()
		w.acking--
		w.signalLocked()
		w.mu.Unlock()
	}
}

// flushed says whether every connection carries this end's last words:
// its end block and, if final, the final ack.
func (w *Writer) flushed(final bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.acking > 0 {
		return false
	}
	for _, s := range w.streams {
		if !s.retiring && (!s.endSent || final && !s.finalSent) {
			return false
		}
	}
	return true
}

// halt ends a resumable Writer: no more streams, acks or resends; its
// goroutines return once their connections are closed. It fails it with
// err unless the peer acknowledged the whole stream.
func (w *Writer) halt(err error) {
	if !w.isFinished() {
		w.fail(err, err.Error())
	}
	w.mu.Lock()
	w.stopped, w.closed = true, true
	w.signalLocked()
	w.mu.Unlock()
}

// sendLock is a mutex held across a connection's writes. It is a channel
// so that a goroutine waiting for it is durably blocked in the sense of
// testing/synctest, whose bubbles run links over in-memory connections.
type sendLock chan struct{}

func (l sendLock) Lock()   { l <- struct{}{} }
func (l sendLock) Unlock() { <-l }

func (l sendLock) TryLock() bool {
	select {
	case l <- struct{}{}:
		return true
	default:
		return false
	}
}

// abortAll sends an abort block with reason on every connection (for at
// most AbortTimeout): the peer's link fails at once instead of waiting to
// resume. For a Writer done sending whose link closes with the peer's
// stream unfinished.
func (w *Writer) abortAll(reason string) {
	w.mu.Lock()
	streams := append([]*wstream(nil), w.streams...)
	w.mu.Unlock()
	if len(reason) > MaxReason {
		reason = reason[:MaxReason]
	}
	for _, s := range streams {
		_ = s.c.SetWriteDeadline(time.Now().Add(w.cfg.AbortTimeout))
		_ = s.send(Header{Kind: KindEnd, Flags: FlagAbort}, []byte(reason))
	}
}
