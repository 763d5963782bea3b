package wan

import (
	"errors"
	"os"
	"sync"
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
	passGSO  bool  // GSO batches may pass intact: no loss and no rate limit to apply per segment
	maxHeld  int64 // bytes
	sl       *sleeper
	wake     chan struct{}
	c        pipeCounters

	mu   sync.Mutex
	q    fifo
	held int64 // wire bytes in q
}

// inflight is one accepted packet (or intact GSO batch) waiting in a pipe.
type inflight struct {
	buf     *buffer
	n       int // bytes of buf in use, virtio_net_hdr included
	release int64
	segs    int // wire packets it stands for
	wire    int // their IP bytes
	batch   bool
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
		passGSO: l.Loss == 0 && l.Rate == 0,
		maxHeld: maxHeldBytes,
		sl:      sl,
		wake:    make(chan struct{}, 1),
	}
	if l.Rate > 0 {
		p.maxHeld = max(p.maxHeld, 2*(l.QueueLimit()+int64(float64(l.Rate)/8*l.Delay.Seconds())))
	}
	return p, nil
}

// arrival is one read from a source device as the reader hands it on.
type arrival struct {
	buf  *buffer        // buf.b[:n] holds it, preceded by a virtio_net_hdr if the devices use them
	n    int            //
	seg  *tcp4Segmenter // the segmenter of a GSO batch, nil for a plain packet
	segs int            // wire packets it stands for
	wire int            // their IP bytes
	at   int64          // arrival time
}

// offer takes one arrival into the pipe and reports whether it kept a.buf;
// if not, the caller may reuse it.
func (p *pipe) offer(a *arrival) (kept bool) {
	if a.seg != nil && !p.passGSO {
		p.offerSegments(a.seg, a.at)
		return false
	}
	release, ok := p.admit(a.at, a.segs, a.wire)
	if !ok {
		return false
	}
	x := inflight{buf: a.buf, n: a.n, release: release, segs: a.segs, wire: a.wire, batch: a.seg != nil}
	if a.n <= smallBufSize {
		// Copy wire-sized packets out of the large read buffer so a long
		// delay line pins 2 KiB per packet, not 64 KiB.
		x.buf = getBuffer(a.n)
		copy(x.buf.b, a.buf.b[:a.n])
	} else {
		kept = true
	}
	p.push(x)
	return kept
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

// offerSegments cuts a GSO batch into wire segments and offers each on its
// own, so loss and serialization apply per segment as on a real link.
func (p *pipe) offerSegments(seg *tcp4Segmenter, now int64) {
	b := getBuffer(seg.maxSegment())
	for {
		m := seg.next(b.b)
		if m == 0 {
			putBuffer(b)
			return
		}
		wire := m - vnetHdrLen
		release, ok := p.admit(now, 1, wire)
		if !ok {
			continue
		}
		p.push(inflight{buf: b, n: m, release: release, segs: 1, wire: wire})
		b = getBuffer(seg.maxSegment())
	}
}

func (p *pipe) push(x inflight) {
	p.mu.Lock()
	wasEmpty := p.q.len() == 0
	p.q.push(x)
	p.held += int64(x.wire)
	p.mu.Unlock()
	if wasEmpty {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// run releases packets into the destination device at their release times
// until done is closed (or the sleeper is).
func (p *pipe) run(done <-chan struct{}) {
	var due [64]inflight
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
			p.held -= int64(due[k].wire)
			k++
		}
		p.mu.Unlock()
		for i := range due[:k] {
			p.noteLateness(monoNow() - due[i].release)
			p.deliver(&due[i])
			due[i] = inflight{}
		}
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

func (p *pipe) deliver(x *inflight) {
	if _, err := p.to.tun.Write(x.buf.b[:x.n]); err != nil {
		if !errors.Is(err, os.ErrClosed) { // not Close racing a release
			p.c.writeErrors.Add(uint64(x.segs))
		}
	} else {
		p.c.packets.Add(uint64(x.segs))
		p.c.bytes.Add(uint64(x.wire))
		if x.batch {
			p.c.batches.Add(1)
		}
	}
	putBuffer(x.buf)
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
