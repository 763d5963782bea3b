package link

import (
	"runtime"
	"time"
)

// startCompression sets up the Writer's block pool and, with compression,
// its workers (see Writer).
func (w *Writer) startCompression() {
	compressed := w.cfg.Compression != CompressOff
	size := w.cfg.BlockSize
	w.pool.New = func() any {
		b := &outBlock{raw: make([]byte, 0, size)}
		if compressed {
			b.ready = make(chan struct{}, 1)
		}
		return b
	}
	if !compressed {
		return
	}
	workers := runtime.GOMAXPROCS(0)
	if w.cfg.Compression == CompressAuto {
		w.auto = newAuto(workers)
		w.trials = make(chan *trial, 1)
	}
	w.work = make(chan *outBlock, workers)
	w.wg.Add(workers)
	for range workers {
		go w.compressor()
	}
}

// trial is a sample of a block for a worker to compress with c, to
// measure the codec on the data; the block goes its own way.
type trial struct {
	c   codec
	p   []byte
	buf []byte
}

// newBlock returns a block of the stream at off holding a copy of p, and
// decides how to compress it.
func (w *Writer) newBlock(off uint64, p []byte) *outBlock {
	b := w.pool.Get().(*outBlock)
	b.off = off
	b.raw = append(b.raw[:0], p...)
	b.wire, b.codec, b.want = b.raw, codecNone, codecNone
	b.stream, b.sends, b.acked = nil, 0, false
	switch w.cfg.Compression {
	case CompressS2:
		b.want = codecS2
	case CompressZstd:
		b.want = codecZstd
	case CompressAuto:
		var try codec
		b.want, try = w.auto.pick(time.Now(), w.counters())
		if try != codecNone {
			w.try(try, b.raw)
		}
	}
	return b
}

// try hands a sample of p to a worker to compress with c, unless the
// workers are busy: trials never hold the stream up.
func (w *Writer) try(c codec, p []byte) {
	t, _ := w.trialPool.Get().(*trial)
	if t == nil {
		t = &trial{buf: make([]byte, compressedCap(trialSample))}
	}
	t.c, t.p = c, append(t.p[:0], p[:min(len(p), trialSample)]...)
	select {
	case w.trials <- t:
	default:
		w.trialPool.Put(t)
	}
}

// put hands b to ch (the work or send queue), counting the time Write
// waits for room, until the Writer fails or expired is closed.
func (w *Writer) put(ch chan<- *outBlock, b *outBlock, expired <-chan struct{}) putResult {
	select {
	case ch <- b:
		return putDone
	default:
	}
	start := time.Now()
	defer func() { w.blocked.Add(int64(time.Since(start))) }()
	select {
	case ch <- b:
		return putDone
	case <-w.dead:
		return putDead
	case <-expired:
		return putExpired
	}
}

type putResult int

const (
	putDone    putResult = iota
	putDead              // the Writer failed
	putExpired           // the write deadline passed
)

// compressor is a compression worker: it compresses the blocks Write
// hands it and tells the connection that takes the block, and runs trials,
// until Close or a failure.
func (w *Writer) compressor() {
	defer w.wg.Done()
	for {
		select {
		case b, ok := <-w.work:
			if !ok {
				return
			}
			if need := compressedCap(len(b.raw)); cap(b.buf) < need {
				b.buf = make([]byte, max(need, compressedCap(w.cfg.BlockSize)))
			}
			if p := w.compress(b.want, b.buf, b.raw, false); p != nil {
				b.wire, b.codec = p, b.want
			}
			b.ready <- struct{}{}
		case t := <-w.trials:
			w.compress(t.c, t.buf, t.p, true)
			w.trialPool.Put(t)
		case <-w.dead:
			return
		}
	}
}

// compress compresses raw with c into buf (see compress), measuring the
// codec for Auto.
func (w *Writer) compress(c codec, buf, raw []byte, trial bool) []byte {
	if w.auto == nil {
		return compress(c, buf, raw)
	}
	start := time.Now()
	p := compress(c, buf, raw)
	w.auto.record(c, len(raw), len(p), time.Since(start), trial)
	return p
}

// counters returns what Auto measures the connections and Write by.
func (w *Writer) counters() sendCounters {
	return sendCounters{raw: w.wrote.Load(), wire: w.wire.Load(), starved: w.starved.Load(),
		blocked: w.blocked.Load(), streams: w.nstreams.Load()}
}
