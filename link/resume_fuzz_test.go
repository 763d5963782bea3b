package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// FuzzResumableReader feeds arbitrary bytes to a resumable Reader as one
// connection whose peer has written 100 bytes: it fails, or delivers
// exactly the total an end block announced, never more than the data
// blocks declare, holding no more than the window; acks beyond the 100
// bytes break the protocol; and the connection's end is not the stream's
// failure (the session would resume).
func FuzzResumableReader(f *testing.F) {
	f.Add(append(append(data(0, "hello"), ack(3, 0)...), end(5)...))
	f.Add(append(append(append(data(0, "hello"), data(0, "hello")...), data(5, "world")...), end(10)...)) // a resend
	f.Add(append(append(append(data(5, "world"), end(10)...), data(0, "hello")...), ack(100, FlagFinal)...))
	f.Add(append(data(0, "hello"), data(2, "llo!")...)) // overlaps without repeating
	f.Add(append(data(0, "hello"), data(0, "help")...)) // the same offset, another length
	f.Add(append(data(0, "hello"), ack(101, 0)...))     // acks more than was sent
	f.Add(append(data(0, "hello"), AppendBlock(nil, Header{Kind: KindEnd, Flags: FlagAbort}, []byte("bye"))...))
	f.Add(append(data(0, "hello"), data(minWindow, "far")...))           // beyond the window
	f.Add(append(append(data(0, "hello"), end(5)...), data(3, "lo")...)) // overlap after the end
	f.Add(append(append(data(0, "hi"), compressed(codecS2, 2, TextData(1, 3000))...), end(3002)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err, st, lost := feedResumable(t, b)
		if st.MaxBuffered > minWindow {
			t.Fatalf("held %d bytes, window %d", st.MaxBuffered, minWindow)
		}
		if err != nil && !errors.Is(err, ErrBlock) && !errors.Is(err, ErrAborted) {
			t.Fatalf("failed with %v", err)
		}
		if err == nil && lost != 1 {
			t.Fatalf("the connection's end was told %d times", lost)
		}
		declared := 0
		for p := b; len(p) >= HeaderSize; {
			h, err := ParseHeader(p)
			if err != nil {
				break
			}
			if h.Kind == KindData {
				declared += int(h.Length)
				if h.Flags != 0 && len(p) >= HeaderSize+lenPrefix {
					declared += int(binary.BigEndian.Uint32(p[HeaderSize:]))
				}
			}
			p = p[min(len(p), HeaderSize+int(h.Length)):]
		}
		if len(got) > declared {
			t.Fatalf("%d bytes out of blocks declaring %d", len(got), declared)
		}
	})
}

// feedResumable feeds b to a resumable Reader as one connection whose
// peer wrote 100 bytes, and returns what it delivered, if the whole
// stream came, its failure, its stats and how often it told the session
// of the connection's end.
func feedResumable(t *testing.T, b []byte) ([]byte, error, ReaderStats, int) {
	var lost atomic.Int32
	hooks := &resumeHooks{window: minWindow,
		lost: func(any, error, bool) { lost.Add(1) },
		ack:  func(uint64, bool) {},
		acked: func(off uint64) error {
			if off > 100 {
				return fmt.Errorf("%w: ack of %d, beyond the 100 bytes sent", ErrBlock, off)
			}
			return nil
		},
		aborted: func(error) {},
	}
	a, c := net.Pipe()
	r := NewReader(Config{resume: hooks}, c)
	defer r.Close()
	go func() {
		_, _ = a.Write(b)
		a.Close()
	}()
	for deadline := time.Now().Add(10 * time.Second); r.Stats().Streams > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the Reader did not finish its connection")
		}
	}
	err := r.failure()
	var got []byte
	if err == nil && r.complete() {
		var rerr error
		got, rerr = io.ReadAll(r)
		if rerr != nil || int64(len(got)) != int64(r.total) {
			t.Fatalf("read %d bytes of a stream of %d: %v", len(got), r.total, rerr)
		}
	}
	return got, err, r.Stats(), int(lost.Load())
}

// The resumable Reader's rules (reader_resume.go), case by case.
func TestResumableReaderRules(t *testing.T) {
	for name, c := range map[string]struct {
		in   []byte
		want string // the data, or the error's words
	}{
		"acks among data":  {append(append(data(0, "hello"), ack(3, 0)...), end(5)...), "hello"},
		"a resend":         {append(append(append(data(0, "hello"), data(0, "hello")...), data(5, "world")...), end(10)...), "helloworld"},
		"any order":        {append(append(append(data(5, "world"), end(10)...), data(0, "hello")...), ack(100, FlagFinal)...), "helloworld"},
		"resend after end": {append(append(append(data(0, "hello"), end(10)...), data(5, "world")...), data(0, "hello")...), "helloworld"},
		"overlap":          {append(data(0, "hello"), data(2, "llo!")...), "overlaps bytes already received"},
		"other length":     {append(append(data(0, "he"), data(4, "hello")...), data(4, "help")...), "overlaps"},
		"ack beyond sent":  {append(data(0, "hello"), ack(101, 0)...), "beyond the 100 bytes sent"},
		"abort":            {append(data(0, "hello"), AppendBlock(nil, Header{Kind: KindEnd, Flags: FlagAbort}, []byte("bye"))...), "bye"},
		"beyond window": {append(append(AppendBlock(nil, Header{Kind: KindData}, make([]byte, MaxBlock)),
			AppendBlock(nil, Header{Kind: KindData, Offset: MaxBlock}, make([]byte, MaxBlock))...), data(2*MaxBlock, "!")...), "beyond the window"},
		"beyond the end": {append(append(data(0, "hello"), end(5)...), data(5, "!")...), "beyond the end"},
	} {
		got, err, _, _ := feedResumable(t, c.in)
		if err != nil {
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want %q", name, err, c.want)
			}
		} else if string(got) != c.want {
			t.Errorf("%s: read %q, want %q", name, got, c.want)
		}
	}
}

// FuzzWriterAck: a resumable Writer takes any sequence of acks a peer
// may send (in order, stale, repeated, or lying): one beyond what was
// written breaks the protocol (ErrBlock) and changes nothing; any other
// drops exactly the blocks it covers; what the Writer keeps adds up and
// never exceeds the window.
func FuzzWriterAck(f *testing.F) {
	f.Add(uint16(300), []byte{0, 0, 0x10, 0, 0, 0, 0x20, 0, 0, 0, 0x10, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint16(1), []byte{0, 0, 0, 1, 0, 0, 0, 0})
	f.Add(uint16(0), []byte{0, 0, 0, 1})
	f.Add(uint16(1024), []byte{0, 0x10, 0, 0, 0, 0x0f, 0xff, 0xff, 0, 0x10, 0, 1})
	f.Fuzz(func(t *testing.T, kib uint16, acks []byte) {
		hooks := &resumeHooks{window: minWindow,
			lost: func(any, error, bool) {}, ack: func(uint64, bool) {},
			acked: func(uint64) error { return nil }, aborted: func(error) {}}
		w := NewWriter(Config{BlockSize: 4000, SendQueue: 2 << 20, resume: hooks})
		defer w.wg.Wait()
		defer w.halt(ErrClosed)
		size := int(kib%1025) << 10 // up to 1 MiB: queued without a connection
		if n, err := w.Write(make([]byte, size)); n != size || err != nil {
			t.Fatalf("wrote %d of %d bytes: %v", n, size, err)
		}
		top := uint64(size)
		var acked uint64
		for ; len(acks) >= 4; acks = acks[4:] {
			off := uint64(binary.BigEndian.Uint32(acks)) % (2*top + 2)
			err := w.ack(off)
			if (err != nil) != (off > top) || err != nil && !errors.Is(err, ErrBlock) {
				t.Fatalf("ack of %d of %d bytes written: %v", off, top, err)
			}
			if err == nil {
				acked = max(acked, off)
			}
			w.mu.Lock()
			cost := 0
			for _, b := range w.kept {
				cost += len(b.raw) + BlockCost
				if b.end() <= acked {
					t.Errorf("a block of %d to %d is kept after an ack of %d", b.off, b.end(), acked)
				}
			}
			if w.acked != acked || w.keptCost != cost || w.maxKept > minWindow || w.top != top {
				t.Errorf("acked %d (want %d), kept %d (blocks add up to %d), at most %d (window %d), top %d (want %d)",
					w.acked, acked, w.keptCost, cost, w.maxKept, minWindow, w.top, top)
			}
			w.mu.Unlock()
		}
	})
}
