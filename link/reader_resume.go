package link

import (
	"errors"
	"fmt"
)

// A resumable Reader (its Config set up by a session, resume.go) differs
// from a plain one in four ways. A connection that dies is not the
// stream's failure: the session hears of it and the peer's Writer sends
// what was lost again. A data block may repeat one received before (the
// same offset and length): it is read and dropped; one that overlaps
// received bytes otherwise still breaks the protocol. Blocks come in any
// order on a connection. And instead of waiting for room, the Reader
// holds whatever comes within the window agreed in the hello (the peer's
// Writer keeps no more unacknowledged, so no more can be in flight) and a
// block beyond it breaks the protocol: the sender's window, not the
// Reader, is the backpressure, and a block the stream needs next can
// never be stuck behind one waiting for room.
//
// It acknowledges what Read has returned: whenever a quarter of the
// window's worth of blocks (as counted) has been read since the last ack
// (of the window the peer's Writer starts with, startWindow, if smaller:
// its window may be below the one agreed),
// or the Reader holds nothing more (acknowledge); with FlagFinal on
// every connection only when the session closes, the peer having
// acknowledged this end's stream in full (finish).

// errDuplicate says a data block repeats bytes already received.
var errDuplicate = errors.New("link: duplicate block")

// checkResumable is check on a resumable link: no order per connection,
// and blocks below what was received are duplicates if they lie wholly
// below it.
func (r *Reader) checkResumable(s *rstream, h Header) error {
	end := h.Offset + uint64(h.Length)
	switch {
	case r.haveTotal && end > r.total:
		return fmt.Errorf("%w: %s: %s beyond the end of the stream at %d (announced on %s)", ErrBlock, s.name, h, r.total, r.totalFrom)
	case end <= r.next:
		return errDuplicate
	case h.Offset < r.next:
		return fmt.Errorf("%w: %s: %s overlaps bytes already received (all below %d) without repeating a block", ErrBlock, s.name, h, r.next)
	}
	return nil
}

// pendingDup says whether a block at h's offset with h's length is held
// already.
func (r *Reader) pendingDup(h Header) bool {
	for _, b := range r.pending {
		if b.off == h.Offset {
			return len(b.p) == int(h.Length)
		}
		if b.off > h.Offset {
			break
		}
	}
	return false
}

// admitResumable reserves room for h on s at once, or fails the Reader
// if the peer sent beyond the window. The window counts each block once:
// of the copies of a block being read at once (it was sent again while
// the first was on its way), one holds its room in the window, the
// others room of their own (twins). So the Reader holds at most the
// window, plus one block per connection read twice at once.
func (r *Reader) admitResumable(s *rstream, h Header, cost int) bool {
	if r.reading == nil {
		r.reading = map[uint64]int{}
	}
	if r.reading[h.Offset] > 0 {
		r.twins += cost
		r.maxTwins = max(r.maxTwins, r.twins)
		r.reading[h.Offset]++
		return true
	}
	if r.buffered+cost > r.bound {
		r.failLocked(fmt.Errorf("%w: %s would make %d bytes held, beyond the window of %d", ErrBlock, h, r.buffered+cost, r.bound))
		return false
	}
	r.buffered += cost
	r.maxBuf = max(r.maxBuf, r.buffered)
	r.reading[h.Offset]++
	return true
}

// doneReading: one copy of the block at off is read no more.
func (r *Reader) doneReading(off uint64) {
	if r.reading[off]--; r.reading[off] <= 0 {
		delete(r.reading, off)
	}
}

// releaseCopy is unreserve for a resumable Reader: a copy of h that did
// not come, or came and was dropped. It reports whether its room was a
// twin's: the block came already, or other copies are still on their
// way and one keeps the room in the window.
func (r *Reader) releaseCopy(h Header) bool {
	r.doneReading(h.Offset)
	if r.check(&rstream{}, h) == errDuplicate || r.pendingDup(h) || r.reading[h.Offset] > 0 {
		r.twins -= int(h.Length) + BlockCost
		return true
	}
	return false
}

// dropped gives back the room of a block admitted and found a duplicate
// when it was inserted (the same block came on another connection
// meanwhile).
func (r *Reader) dropped(s *rstream, h Header) {
	r.unreserve(s, h)
	r.dups++
	r.dupBytes += int64(h.Length)
}

// acknowledge asks the session for an ack of what Read returned, when due
// (see above). Under r.mu.
func (r *Reader) acknowledge() {
	if r.hooks == nil || r.final {
		return
	}
	if r.readOff > r.ackedTo && (r.freed >= min(r.bound, startWindow)/4 || len(r.pending) == 0 || r.pending[0].off > r.readOff) {
		r.ackedTo, r.freed = r.readOff, 0
		r.hooks.ack(r.readOff, false)
	}
}

// finish is for a resumable link closing: if the whole stream came, it is
// acknowledged as delivered (what the application did not read is
// dropped), so that the peer's Writer is done. It reports whether the
// whole stream came.
func (r *Reader) finish() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.haveTotal || r.next != r.total {
		return false
	}
	if !r.final {
		r.final = true
		r.hooks.ack(r.total, true)
	}
	return true
}

// complete says whether the whole stream came.
func (r *Reader) complete() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.haveTotal && r.next == r.total
}

// acked hands the peer's ack on s to the Writer; false if it broke the
// protocol (the Reader failed).
func (r *Reader) acked(s *rstream, h Header) bool {
	if r.hooks == nil {
		r.fail(fmt.Errorf("%w: %s: %s on a link that is not resumable", ErrBlock, s.name, h))
		return false
	}
	if err := r.hooks.acked(h.Offset); err != nil {
		r.fail(fmt.Errorf("%w (on %s)", err, s.name))
		return false
	}
	if h.Flags&FlagFinal != 0 {
		r.mu.Lock()
		s.final, r.peerDone = true, true
		r.cond.Broadcast()
		r.mu.Unlock()
	}
	return true
}

// quiet says whether the peer said it needs nothing more (a final ack
// came) and every connection has brought the peer's end and final ack:
// nothing more will come on any.
func (r *Reader) quiet() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.peerDone {
		return false
	}
	for _, s := range r.streams {
		if !s.ended || !s.final {
			return false
		}
	}
	return true
}
