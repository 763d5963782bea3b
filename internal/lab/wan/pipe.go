package wan

import (
	"errors"
	"os"
	"sync"

	"github.com/gridlink/gridlink/tun"
)

// maxHeldBytes bounds the bytes one pipe holds in flight when its link has no
// rate limit (and so no queue limit): 64 MiB is 10 Gbit/s over a 50 ms
// one-way delay. A rate-limited pipe gets at least its queue limit plus one
// delay's worth of its rate, so only the model's tail drop applies to it.
const maxHeldBytes = 64 << 20

// pipe is the I/O half of one direction of a link: the model decides, a
// FIFO holds accepted packets until their release time, and the pipe's own
// goroutine (run) writes them into the destination device.
//
// The source port's reader is the pipe's only producer, so the model needs
// no lock; mu guards the FIFO between producer and run.
type pipe struct {
	from, to *port
	link     Link
	model    *Model
	maxHeld  int64 // bytes
	sl       *sleeper
	wake     chan struct{}
	c        pipeCounters
	wbufs    [][]byte   // run's: a batch to write
	wlarge   []*buffer  // run's: the large buffers of a batch
	pending  []inflight // the reader's: packets of the current read, for signal to push

	mu   sync.Mutex
	q    fifo
	held int64 // wire bytes in q
}

// inflight is one accepted packet waiting in a pipe.
type inflight struct {
	buf     *buffer // the packet is buf.b[tun.Offset:][:n]
	n       int
	release int64
}

func newPipe(from, to *port, l Link, seed uint64, sp *spinner) (*pipe, error) {
	sl, err := newSleeper(sp)
	if err != nil {
		return nil, err
	}
	p := &pipe{
		from:    from,
		to:      to,
		link:    l,
		model:   NewModel(l, seed),
		maxHeld: maxHeldBytes,
		sl:      sl,
		wake:    make(chan struct{}, 1),
	}
	if l.Rate > 0 {
		p.maxHeld = max(p.maxHeld, 2*(l.QueueLimit()+int64(float64(l.Rate)/8*l.Delay.Seconds())))
	}
	return p, nil
}

// offer takes the packet buf.b[tun.Offset:][:n], which arrived at time
// at, into the pipe and reports whether it kept buf; if not, the caller
// may reuse it.
func (p *pipe) offer(buf *buffer, n int, at int64) (kept bool) {
	release, ok := p.admit(at, 1, n)
	if !ok {
		return false
	}
	p.pending = append(p.pending, inflight{buf: buf, n: n, release: release})
	return true
}

// admit runs a packet of wire bytes, standing for segs wire packets,
// through the model and counts it if dropped.
func (p *pipe) admit(now int64, segs, wire int) (release int64, ok bool) {
	p.mu.Lock()
	full := p.held+int64(wire) > p.maxHeld
	p.mu.Unlock()
	if full {
		p.c.queueDrops.Add(uint64(segs))
		return 0, false
	}
	release, v := p.model.Offer(now, wire)
	switch v {
	case DropLoss:
		p.c.lossDrops.Add(uint64(segs))
		return 0, false
	case DropQueue:
		p.c.queueDrops.Add(uint64(segs))
		return 0, false
	}
	return release, true
}

func (p *pipe) push(x inflight) {
	p.mu.Lock()
	p.q.push(x)
	p.held += int64(x.n)
	p.mu.Unlock()
}

// signal wakes run after the reader has pushed a read's packets, so the
// packets of one read are released (and coalesced) together.
func (p *pipe) signal() {
	p.mu.Lock()
	for _, x := range p.pending {
		p.q.push(x)
		p.held += int64(x.n)
	}
	p.mu.Unlock()
	clear(p.pending)
	p.pending = p.pending[:0]
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run releases packets into the destination device at their release times
// until done is closed (or the sleeper is).
func (p *pipe) run(done <-chan struct{}) {
	var due [128]inflight
	for {
		select {
		case <-done:
			return
		default:
		}
		p.mu.Lock()
		if p.q.len() == 0 {
			p.mu.Unlock()
			select {
			case <-p.wake:
				continue
			case <-done:
				return
			}
		}
		next := p.q.front().release
		p.mu.Unlock()

		if next > monoNow() {
			if err := p.sl.sleepUntil(next); err != nil {
				return
			}
		}
		// sleepUntil may return a little early (see there); the head is
		// due then all the same.
		cutoff := max(monoNow(), next)
		k := 0
		p.mu.Lock()
		for k < len(due) && p.q.len() > 0 && p.q.front().release <= cutoff {
			due[k] = p.q.pop()
			p.held -= int64(due[k].n)
			k++
		}
		p.mu.Unlock()
		for i := range due[:k] {
			p.noteLateness(monoNow() - due[i].release)
		}
		p.deliver(due[:k])
		clear(due[:k])
	}
}

// noteLateness records how late (or, if negative, early) a release
// happened; only run calls it.
func (p *pipe) noteLateness(late int64) {
	p.c.releases.Add(1)
	p.c.errSum.Add(late)
	late = abs(late)
	p.c.errAbsSum.Add(late)
	if late > p.c.errMax.Load() {
		p.c.errMax.Store(late)
	}
}

// deliver writes the packets due together in one batch, each copied into
// a large buffer: the device coalesces the segments of a flow (GRO) into
// the buffer of the first, which needs the room.
func (p *pipe) deliver(xs []inflight) {
	p.wbufs = p.wbufs[:0]
	wire := 0
	single := len(xs) == 1
	for _, x := range xs {
		b := x.buf.b[:tun.Offset+x.n]
		if !single {
			// Every packet may head a coalesced batch (the first of its
			// flow, or the one after a PSH): give each the room.
			lb := getBuffer(largeBufSize)
			p.wlarge = append(p.wlarge, lb)
			b = lb.b[:copy(lb.b, b)]
		}
		p.wbufs = append(p.wbufs, b)
		wire += x.n
	}
	if _, err := p.to.tun.Write(p.wbufs, tun.Offset); err != nil {
		if !errors.Is(err, os.ErrClosed) { // not Close racing a release
			p.c.writeErrors.Add(uint64(len(xs)))
		}
	} else {
		p.c.packets.Add(uint64(len(xs)))
		p.c.bytes.Add(uint64(wire))
		if len(xs) > 1 {
			p.c.batches.Add(1)
		}
	}
	for _, x := range xs {
		putBuffer(x.buf)
	}
	for i, lb := range p.wlarge {
		putBuffer(lb)
		p.wlarge[i] = nil
	}
	p.wlarge = p.wlarge[:0]
}

// drain frees what is left in the FIFO; run must have returned.
func (p *pipe) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.q.len() > 0 {
		putBuffer(p.q.pop().buf)
	}
	p.held = 0
}

// fifo is a growable ring of in-flight packets.
type fifo struct {
	ring       []inflight
	head, size int
}

func (f *fifo) len() int { return f.size }

func (f *fifo) front() *inflight { return &f.ring[f.head] }

func (f *fifo) push(x inflight) {
	if f.size == len(f.ring) {
		grown := make([]inflight, max(64, 2*len(f.ring)))
		n := copy(grown, f.ring[f.head:])
		copy(grown[n:], f.ring[:f.head])
		f.ring, f.head = grown, 0
	}
	f.ring[(f.head+f.size)%len(f.ring)] = x
	f.size++
}

func (f *fifo) pop() inflight {
	x := f.ring[f.head]
	f.ring[f.head] = inflight{}
	f.head = (f.head + 1) % len(f.ring)
	f.size--
	if len(f.ring) > 4096 && f.size < len(f.ring)/8 {
		// Give back what a burst grew.
		shrunk := make([]inflight, len(f.ring)/2)
		for i := range f.size {
			shrunk[i] = f.ring[(f.head+i)%len(f.ring)]
		}
		f.ring, f.head = shrunk, 0
	}
	return x
}
