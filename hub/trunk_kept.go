package hub

import "github.com/gridlink/gridlink/wire"

// Trunk.Send copies a payload into the queue's blocks. Large data
// payloads go into the queue as they are instead, behind their header,
// and the writer's writev sends header and payload together (issue 37,
// BenchmarkRoutedCost's profile: each copy was 10-14% of the routed
// path's CPU):
//   - a hub forwards a payload read into a pooled buffer (wire.Frame.Keep,
//     SendKept), which goes back to its pool once written;
//   - a node's circuit sends the application's bytes by reference
//     (SendRef) and waits until the writer is done with them (Released)
//     before its Write returns.

// qbuf is one buffer of a trunk's queue: a block (pooled or small) that
// frames are copied into, or a kept payload.
type qbuf struct {
	b    []byte
	kept *[]byte // b's pooled buffer (wire.PutBody), nil for a block
	ref  bool    // b is the caller's (SendRef): neither pooled nor written into
}

// block says frames may be copied into the buffer's free room.
func (e qbuf) block() bool { return e.kept == nil && !e.ref }

// release returns the buffer to its pool.
func (e qbuf) release() {
	if e.ref {
		return
	}
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

// SendRef queues a data frame on circuit whose payload is p itself, not a
// copy, and returns its number for Released; false if the trunk is
// closed. The caller must leave p alone until Released(ref) returns.
func (l *Trunk) SendRef(circuit uint32, p []byte) (ref uint64, ok bool) {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	if l.closed {
		return 0, false
	}
	var h [wire.HeaderSize]byte
	wire.PutHeaderFlags(h[:], wire.TData, 0, circuit, len(p))
	l.appendLocked(h[:], false)
	l.q = append(l.q, qbuf{b: p, ref: true})
	l.qlen += len(p)
	l.refs++
	l.kickLocked()
	return l.refs, true
}

// Released waits until the writer is done with the payloads queued by
// SendRef up to ref: written, or dropped because the trunk closed (a
// writer stuck on a peer that stopped reading gives up after
// writeTimeout).
func (l *Trunk) Released(ref uint64) {
	l.qmu.Lock()
	for l.freed < ref {
		l.freedC.Wait()
	}
	l.qmu.Unlock()
}

// freeLocked records that the writer is done with the payloads queued by
// reference up to ref. qmu is held.
func (l *Trunk) freeLocked(ref uint64) {
	if ref > l.freed {
		l.freed = ref
		l.freedC.Broadcast()
	}
}
