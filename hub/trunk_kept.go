package hub

import "github.com/gridlink/gridlink/wire"

// A hub forwards a circuit's data frames. Trunk.Send copies a payload
// into the queue's blocks; a large one read into a pooled buffer
// (wire.Frame.Keep) goes into the queue as it is instead, behind its
// header, and back to its pool once written: the relay's one copy of
// every byte (BenchmarkRoutedCost's profile: 12% of the routed path's
// CPU, issue 37). The writer's writev sends header and payload together.

// qbuf is one buffer of a trunk's queue: a block (pooled or small) that
// frames are copied into, or a kept payload.
type qbuf struct {
	b    []byte
	kept *[]byte // b's pooled buffer (wire.PutBody), nil for a block
}

// release returns the buffer to its pool.
func (e qbuf) release() {
	if e.kept != nil {
		wire.PutBody(e.kept)
		return
	}
	putBlock(e.b)
}

// KeepAbove is the smallest payload worth forwarding by SendKept: below
// it a copy costs less than a buffer of its own in the writer's writev.
const KeepAbove = 4 << 10

// SendKept queues a data frame on circuit whose payload is (*body)[:n],
// a buffer taken with wire.Frame.Keep, without copying it; the trunk
// returns body to its pool once written, or at once if the trunk is
// closed (then it reports false, as Send does).
func (l *Trunk) SendKept(circuit uint32, body *[]byte, n int) bool {
	l.qmu.Lock()
	if l.closed {
		l.qmu.Unlock()
		wire.PutBody(body)
		return false
	}
	var h [wire.HeaderSize]byte
	wire.PutHeaderFlags(h[:], wire.TData, 0, circuit, n)
	l.appendLocked(h[:], false)
	l.q = append(l.q, qbuf{b: (*body)[:n], kept: body})
	l.qlen += n
	l.kickLocked()
	l.qmu.Unlock()
	return true
}
