package link

import (
	"fmt"
	"slices"
)

// rblock is a received data block; r bytes of it have been read.
type rblock struct {
	off uint64
	p   []byte
	r   int
}

// admit waits until the reorder buffer has room for the data block h read
// on s, and reserves it (see Reader for the rule). It reports false if the
// Reader has failed or closed, or h breaks the protocol.
func (r *Reader) admit(s *rstream, h Header) (ok, dup bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cost := int(h.Length) + BlockCost
	for {
		if r.err != nil {
			return false, false
		}
		err := r.check(s, h)
		if err == errDuplicate || err == nil && r.hooks != nil && r.pendingDup(h) {
			r.dups++
			r.dupBytes += int64(h.Length)
			return true, true
		}
		if err != nil {
			r.failLocked(err)
			return false, false
		}
		if r.hooks != nil {
			return r.admitResumable(s, h, cost), false
		}
		if r.buffered+cost <= r.bound-reserve || (h.Offset == r.next && r.buffered+cost <= r.bound) {
			r.buffered += cost
			r.maxBuf = max(r.maxBuf, r.buffered)
			return true, false
		}
		r.cond.Wait()
	}
}

// release gives back the room admit reserved for a block that never came.
func (r *Reader) release(s *rstream, h Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unreserve(s, h)
	r.cond.Broadcast()
}

// unreserve gives back the room admit reserved for h on s, which did
// not come (or broke the protocol).
func (r *Reader) unreserve(s *rstream, h Header) {
	cost := int(h.Length) + BlockCost
	if r.hooks != nil && r.releaseCopy(h) {
		return
	}
	r.buffered -= cost
}

// check tells whether the data block h on s can belong to the stream as
// far as is known now: not below what has been received, within the total,
// after s's previous block.
func (r *Reader) check(s *rstream, h Header) error {
	end := h.Offset + uint64(h.Length)
	if r.hooks != nil {
		return r.checkResumable(s, h)
	}
	switch {
	case h.Offset < s.last:
		return fmt.Errorf("%w: %s: %s after a block ending at %d on the same stream", ErrBlock, s.name, h, s.last)
	case h.Offset < r.next:
		return fmt.Errorf("%w: %s: %s overlaps bytes already received (all below %d)", ErrBlock, s.name, h, r.next)
	case r.haveTotal && end > r.total:
		return fmt.Errorf("%w: %s: %s beyond the end of the stream at %d (announced on %s)", ErrBlock, s.name, h, r.total, r.totalFrom)
	}
	return nil
}

// insert puts the payload p of the data block h, admitted before, into the
// reorder buffer; it came compressed with c in wire bytes. It reports false
// if the Reader has failed.
func (r *Reader) insert(s *rstream, h Header, p []byte, c codec, wire uint32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.cond.Broadcast()
	if r.err == nil {
		if err := r.check(s, h); err == errDuplicate || r.hooks != nil && r.pendingDup(h) {
			r.dropped(s, h)
			return true
		} else if err != nil {
			r.failLocked(err)
		}
	}
	i, _ := slices.BinarySearchFunc(r.pending, h.Offset, func(b *rblock, off uint64) int {
		switch {
		case b.off < off:
			return -1
		case b.off > off:
			return 1
		}
		return 0
	})
	end := h.Offset + uint64(h.Length)
	if r.err == nil && i > 0 && r.pending[i-1].end() > h.Offset {
		r.failLocked(fmt.Errorf("%w: %s: %s overlaps %s received before", ErrBlock, s.name, h, r.pending[i-1]))
	}
	if r.err == nil && i < len(r.pending) && end > r.pending[i].off {
		r.failLocked(fmt.Errorf("%w: %s: %s overlaps %s received before", ErrBlock, s.name, h, r.pending[i]))
	}
	if r.err != nil {
		r.unreserve(s, h)
		return false
	}
	if r.hooks != nil {
		r.doneReading(h.Offset) // its room in the window is the block's now
	}
	r.pending = slices.Insert(r.pending, i, &rblock{off: h.Offset, p: p})
	r.received += int64(h.Length)
	r.wire += int64(wire)
	r.blocks.add(c)
	s.last = end
	for ; i < len(r.pending) && r.pending[i].off == r.next; i++ {
		r.next = r.pending[i].end()
	}
	return true
}

func (b *rblock) end() uint64 { return b.off + uint64(len(b.p)) }

func (b *rblock) String() string { return fmt.Sprintf("data [%d, %d)", b.off, b.end()) }

// end handles an end block on s: the sender closed the stream at h.Offset
// bytes, or aborted it.
func (r *Reader) end(s *rstream, h Header, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.cond.Broadcast()
	if r.err != nil {
		return
	}
	if h.Flags&FlagAbort != 0 {
		r.failLocked(fmt.Errorf("%w (on %s): %q", ErrAborted, s.name, reason))
		return
	}
	top := r.next
	if len(r.pending) > 0 {
		top = max(top, r.pending[len(r.pending)-1].end())
	}
	s.ended = true
	switch {
	case r.haveTotal && h.Offset != r.total:
		r.failLocked(fmt.Errorf("%w: %s ends the stream at %d, %s at %d", ErrBlock, s.name, h.Offset, r.totalFrom, r.total))
	case top > h.Offset:
		r.failLocked(fmt.Errorf("%w: %s ends the stream at %d, below bytes already received (up to %d)", ErrBlock, s.name, h.Offset, top))
	case h.Offset < s.last:
		r.failLocked(fmt.Errorf("%w: %s ends the stream at %d, below its own last block (up to %d)", ErrBlock, s.name, h.Offset, s.last))
	default:
		r.total, r.haveTotal, r.totalFrom = h.Offset, true, s.name
	}
}
