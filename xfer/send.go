package xfer

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// window bounds the entries a sender has offered and not yet seen
// finished: the receiver holds state for each, the sender a slot.
const window = 1024

// sender offers entries to a receiver over ep and sends the blocks it
// wants. See the package doc for the exchange.
type sender struct {
	ep    *endpoint
	t     tree
	obs   *observer
	tally *tally
	limit int64 // bytes per second of file data, 0 for no limit
	hold  *Hold // nil: never paused
	ctx   context.Context
	// readEnded is closed when read returns: a sender held at the hold
	// stops waiting then (the receiver went away or aborted).
	readEnded chan struct{}

	srcs  []source
	byID  map[uint32]*source
	slots chan struct{}
	wants chan want
	left  atomic.Int64
	done  chan struct{}
	quit  chan struct{} // closed when the session ends
	once  sync.Once

	sentTotal int64
	start     time.Time
}

// send runs a sending session: walks paths in t (see walk) and sends them
// until the receiver has answered for every entry and said bye. Failures
// of single entries go to the tally; the error is the session's.
func send(ctx context.Context, ep *endpoint, t tree, paths []string, recursive bool, top func(string) string, obs *observer, limit int64, hold *Hold, tl *tally) error {
	s := &sender{ep: ep, t: t, obs: obs, tally: tl, limit: limit, hold: hold, ctx: ctx, readEnded: make(chan struct{}), byID: map[uint32]*source{},
		slots: make(chan struct{}, window), wants: make(chan want, window), done: make(chan struct{}), quit: make(chan struct{}), start: time.Now()}
	srcs, fails := walk(t, paths, recursive, top)
	s.srcs = srcs
	var size, files int64
	for i := range srcs {
		s.byID[srcs[i].e.id] = &srcs[i]
		size += int64(srcs[i].e.size)
		if srcs[i].e.kind != kindDir {
			files++
		}
	}
	for _, f := range fails {
		tl.failed(f.path, f.text)
		obs.event(Event{Kind: EventDone, Path: f.path, Err: f.text})
		if err := ep.send(mFail, f.encode()); err != nil {
			return err
		}
	}
	obs.event(Event{Kind: EventPlan, N: files, Size: size})
	if err := ep.send(mPlan, enc(nil).u64(uint64(files)).u64(uint64(size))); err != nil {
		return err
	}
	s.left.Store(int64(len(srcs)))
	if len(srcs) == 0 {
		close(s.done)
	}
	stop := context.AfterFunc(ctx, func() { ep.c.Close() })
	defer stop()
	defer close(s.quit)

	errc := make(chan error, 2)
	go func() { errc <- s.offer() }()
	readDone := make(chan error, 1)
	go func() {
		err := s.read()
		close(s.readEnded)
		readDone <- err
	}()
	for {
		select {
		case w := <-s.wants:
			if err := s.answer(w); err != nil {
				return s.ctxErr(ctx, err)
			}
		case err := <-errc:
			if err != nil {
				return s.ctxErr(ctx, err)
			}
		case err := <-readDone:
			if err == nil {
				err = fmt.Errorf("xfer: the receiver said bye before all entries were answered")
			}
			return s.ctxErr(ctx, err)
		case <-s.done:
			if err := ep.sendNow(mBye); err != nil {
				return s.ctxErr(ctx, err)
			}
			return s.ctxErr(ctx, <-readDone)
		}
	}
}

func (s *sender) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && err != nil {
		return ctx.Err()
	}
	return err
}

// offer sends the entries, at most window unfinished at a time.
func (s *sender) offer() error {
	for i := range s.srcs {
		select {
		case s.slots <- struct{}{}:
		default:
			if err := s.ep.flush(); err != nil {
				return err
			}
			select {
			case s.slots <- struct{}{}:
			case <-s.quit:
				return nil
			}
		}
		if err := s.ep.send(mFile, s.srcs[i].e.encode()); err != nil {
			return err
		}
	}
	return s.ep.flush()
}

// finish marks an entry finished.
func (s *sender) finish() {
	<-s.slots
	if s.left.Add(-1) == 0 {
		s.once.Do(func() { close(s.done) })
	}
}

// read takes the receiver's answers until its bye.
func (s *sender) read() error {
	answered := map[uint32]bool{}
	for {
		typ, p, err := s.ep.recv()
		if err != nil {
			return err
		}
		switch typ {
		case mWant:
			w, err := decodeWant(p)
			if err != nil {
				return err
			}
			if s.byID[w.id] == nil || answered[w.id] {
				return fmt.Errorf("xfer: an answer for entry %d, not offered or answered before", w.id)
			}
			if src := s.byID[w.id]; w.status == wantSend && (src.e.kind != kindFile || len(w.have) > blocks(src.e.size, src.e.block)) {
				return fmt.Errorf("xfer: the receiver wants %s with %d blocks", src.e.path, len(w.have))
			}
			answered[w.id] = true
			select {
			case s.wants <- w:
			case <-s.quit:
				return nil
			}
		case mAck:
			a, err := decodeAck(p)
			if err != nil {
				return err
			}
			src := s.byID[a.id]
			if src == nil || !answered[a.id] {
				return fmt.Errorf("xfer: an ack for entry %d, never asked for", a.id)
			}
			s.acked(src, a)
		case mBye:
			return nil
		case mAbort:
			why, err := decodeText(p)
			if err != nil {
				return err
			}
			return &RefusedError{"refused by the receiver: " + why}
		default:
			return fmt.Errorf("%w: message %d from a receiver", errFrame, typ)
		}
	}
}

func (s *sender) acked(src *source, a ack) {
	if a.ok {
		s.tally.file(int64(src.e.size), int64(a.kept))
		s.obs.event(Event{Kind: EventDone, ID: src.e.id, Path: src.e.path, Size: int64(src.e.size), N: int64(src.e.size)})
	} else {
		s.tally.failed(src.e.path, a.text)
		s.obs.event(Event{Kind: EventDone, ID: src.e.id, Path: src.e.path, Size: int64(src.e.size), Err: a.text})
	}
	s.finish()
}

// answer acts on a receiver's want.
func (s *sender) answer(w want) error {
	src := s.byID[w.id]
	switch {
	case w.status == wantError:
		s.tally.failed(src.e.path, w.text)
		s.obs.event(Event{Kind: EventDone, ID: w.id, Path: src.e.path, Size: int64(src.e.size), Err: w.text})
		s.finish()
		return nil
	case w.status == wantSkip && src.e.kind == kindDir:
		s.tally.dir()
		s.obs.event(Event{Kind: EventDir, ID: w.id, Path: src.e.path})
		s.finish()
		return nil
	case w.status == wantSkip:
		s.tally.file(int64(src.e.size), int64(src.e.size))
		s.obs.event(Event{Kind: EventDone, ID: w.id, Path: src.e.path, Size: int64(src.e.size), N: int64(src.e.size)})
		s.finish()
		return nil
	}
	err := s.sendFile(src, w.have)
	if err == nil && len(s.wants) == 0 {
		err = s.ep.flush()
	}
	return err
}

// sendFile reads src block by block and sends the blocks whose digests
// differ from have, then the file's digest. A file it cannot read fails
// alone (mFail); the error is the session's.
func (s *sender) sendFile(src *source, have []uint64) error {
	e := src.e
	s.obs.event(Event{Kind: EventStart, ID: e.id, Path: e.path, Size: int64(e.size)})
	f, err := s.t.Open(src.name)
	if err != nil {
		return s.failFile(src, pathErr(s.t, src.name, err))
	}
	defer f.Close()
	n := blocks(e.size, e.block)
	digests := make([]uint64, n)
	buf := make([]byte, min(uint64(e.block), e.size))
	var off uint64
	for i := range n {
		b := buf[:min(uint64(e.block), e.size-off)]
		if _, err := f.ReadAt(b, int64(off)); err != nil {
			if err == io.EOF {
				return s.failChanged(src, s.t.Name(src.name)+": changed while it was sent (it shrank): not stored")
			}
			return s.failFile(src, pathErr(s.t, src.name, err))
		}
		digests[i] = blockDigest(b)
		if i == n-1 {
			// all read: a file that changed meanwhile may be torn
			if why := changedSince(f, e, s.t.Name(src.name)); why != "" { // the last block is not sent
				return s.failChanged(src, why)
			}
		}
		if i >= len(have) || have[i] != digests[i] {
			if err := s.held(); err != nil {
				return err
			}
			hdr := block{id: e.id, offset: off, digest: digests[i]}.header()
			if err := s.ep.send(mData, hdr, b); err != nil {
				return err
			}
			s.tally.sent(int64(len(b)))
			s.pace(int64(len(b)))
		}
		off += uint64(len(b))
		s.obs.event(Event{Kind: EventBytes, ID: e.id, Path: e.path, Size: int64(e.size), N: int64(off)})
	}
	return s.ep.send(mEnd, enc(nil).u32(e.id).u64(fileDigest(e.size, digests)))
}

func (s *sender) failFile(src *source, why string) error {
	s.tally.failed(src.e.path, why)
	s.obs.event(Event{Kind: EventDone, ID: src.e.id, Path: src.e.path, Size: int64(src.e.size), Err: why})
	s.finish()
	return s.ep.send(mFail, fail{id: src.e.id, path: src.e.path, text: why}.encode())
}

// failChanged fails a file that changed while it was sent: the receiver
// drops what it got, and both ends report the file as changed.
func (s *sender) failChanged(src *source, why string) error {
	s.tally.fail(FileError{Path: src.e.path, Error: why, Changed: true})
	s.obs.event(Event{Kind: EventDone, ID: src.e.id, Path: src.e.path, Size: int64(src.e.size), Err: why})
	s.finish()
	return s.ep.send(mFail, fail{id: src.e.id, path: src.e.path, text: why, changed: true}.encode())
}

// changedSince says how f, open for sending, is no longer the file its
// entry describes ("" if it still is): its size or modification time
// differ from when it was listed. A writer that keeps both (or writes
// within the file system's timestamp granularity) goes unseen.
func changedSince(f *os.File, e entry, name string) string {
	fi, err := f.Stat()
	switch {
	case err != nil:
		return fmt.Sprintf("%s: %v", name, err)
	case fi.Size() != int64(e.size):
		return fmt.Sprintf("%s: changed while it was sent (%d bytes, now %d): not stored", name, e.size, fi.Size())
	case fi.ModTime().UnixNano() != e.mtime:
		return fmt.Sprintf("%s: changed while it was sent (modified %s, now %s): not stored", name,
			time.Unix(0, e.mtime).Format(time.RFC3339Nano), fi.ModTime().Format(time.RFC3339Nano))
	}
	return ""
}

// held waits while the transfer is paused (Hold), with what it sent
// flushed to the receiver; the time held does not count for the rate
// limit.
func (s *sender) held() error {
	if s.hold == nil || !s.hold.Paused() {
		return nil
	}
	if err := s.ep.flush(); err != nil {
		return err
	}
	d, err := s.hold.wait(s.ctx, s.readEnded)
	s.start = s.start.Add(d)
	return err
}

// pace sleeps as long as the rate limit asks for n more bytes.
func (s *sender) pace(n int64) {
	if s.limit <= 0 {
		return
	}
	s.sentTotal += n
	due := s.start.Add(time.Duration(float64(s.sentTotal) / float64(s.limit) * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		_ = s.ep.flush()
		time.Sleep(d)
	}
}

// observer serializes events to a callback; nil drops them.
type observer struct {
	mu sync.Mutex
	f  func(Event)
}

func (o *observer) event(e Event) {
	if o == nil || o.f == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.f(e)
}
