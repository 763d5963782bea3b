package link

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
)

// protocolError waits for the Reader's failure and checks it.
func protocolError(t *testing.T, r *Reader, want ...string) {
	t.Helper()
	res := wait(t, readAll(r), "reader")
	if !errors.Is(res.err, ErrBlock) {
		t.Fatalf("got %q, %v; want an error wrapping ErrBlock", res.data, res.err)
	}
	for _, w := range want {
		if !strings.Contains(res.err.Error(), w) {
			t.Errorf("error %q does not say %q", res.err, w)
		}
	}
	t.Log(res.err)
}

// handled waits until the Reader has taken in what cond says (under its
// lock): a block written on a pipe is read by its stream's goroutine
// before it is handled, so a test that orders two streams' blocks waits
// for the first to be handled, not only written (TestBlockBeyondTotal
// once saw stream 1's data handled before stream 0's end).
func handled(t *testing.T, r *Reader, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, "the reader to handle "+what, 10*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return cond()
	})
}

func TestDuplicateBlock(t *testing.T) {
	r, ends := rawStreams(t, Config{}, 2)
	send(ends[0], data(5, "world")).Wait()
	send(ends[1], data(5, "world"))
	protocolError(t, r, "overlaps", "data [5, 10)")
}

func TestOverlappingBlock(t *testing.T) {
	r, ends := rawStreams(t, Config{}, 2)
	send(ends[0], data(5, "world")).Wait()
	handled(t, r, "stream 0's block", func() bool { return len(r.pending) > 0 })
	send(ends[1], data(3, "xyz"))
	protocolError(t, r, "overlaps", "data [3, 6)")
}

func TestBlockBelowReceived(t *testing.T) {
	r, ends := rawStreams(t, Config{}, 2)
	send(ends[0], data(0, "hello")).Wait()
	buf := make([]byte, 5)
	if _, err := io.ReadFull(r, buf); err != nil {
		t.Fatal(err)
	}
	send(ends[1], data(2, "ll"))
	protocolError(t, r, "stream 1", "already received")
}

func TestOutOfOrderOnOneStream(t *testing.T) {
	r, ends := rawStreams(t, Config{}, 1)
	send(ends[0], data(10, "later"), data(0, "early"))
	protocolError(t, r, "stream 0", "same stream")
}

func TestBlockBeyondTotal(t *testing.T) {
	r, ends := rawStreams(t, Config{}, 2)
	send(ends[0], end(5)).Wait()
	handled(t, r, "stream 0's end", func() bool { return r.haveTotal })
	send(ends[1], data(3, "abc"))
	protocolError(t, r, "stream 1", "beyond the end")
}

func TestEndBelowReceived(t *testing.T) {
	r, ends := rawStreams(t, Config{}, 2)
	send(ends[0], data(10, "abc")).Wait()
	handled(t, r, "stream 0's block", func() bool { return len(r.pending) > 0 })
	send(ends[1], end(5))
	protocolError(t, r, "stream 1", "ends the stream at 5")
}

func TestOffsetOutOfRange(t *testing.T) {
	r, ends := rawStreams(t, Config{}, 1)
	send(ends[0], data(math.MaxInt64-1, "abc"))
	protocolError(t, r, "stream 0", "beyond any stream")
}

func TestInconsistentTotals(t *testing.T) {
	r, ends := rawStreams(t, Config{}, 2)
	send(ends[0], end(10))
	send(ends[1], end(20))
	protocolError(t, r, "ends the stream at")
}

func TestOversizedBlock(t *testing.T) {
	r, ends := rawStreams(t, Config{}, 2)
	var hdr [HeaderSize]byte
	Header{Kind: KindData, Length: MaxBlock + 1}.Put(hdr[:])
	send(ends[1], hdr[:])
	protocolError(t, r, "stream 1", "data block of 1048577 bytes")
}

// TestReorderBound: a slow stream holds the next block while fast ones
// race ahead; the reorder buffer fills up to its bound and no further,
// and the transfer completes (no deadlock).
func TestReorderBound(t *testing.T) {
	cfg := Config{BlockSize: 32 << 10, ReorderBuffer: 1} // the minimum
	var wc, rc []net.Conn
	for i := range 4 {
		a, b := net.Pipe()
		if i == 0 {
			a = &slowConn{Conn: a, delay: 40 * time.Millisecond, chunk: 8 << 10}
		}
		wc, rc = append(wc, a), append(rc, b)
	}
	w, r := NewWriter(cfg, wc...), NewReader(cfg, rc...)
	defer r.Close()
	sent := randomData(rand.New(rand.NewPCG(5, 6)), 12<<20)
	got := readAll(r)
	werr := make(chan error, 1)
	go func() {
		_, err := w.Write(sent)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		werr <- err
	}()
	if err := wait(t, werr, "writer"); err != nil {
		t.Fatal(err)
	}
	res := wait(t, got, "reader")
	if res.err != nil {
		t.Fatal(res.err)
	}
	sameData(t, res.data, sent)
	st := r.Stats()
	t.Logf("reorder buffer: at most %d of %d bytes", st.MaxBuffered, st.Bound)
	if st.Bound != 2*reserve {
		t.Errorf("bound %d, want the minimum %d", st.Bound, 2*reserve)
	}
	if st.MaxBuffered > st.Bound {
		t.Errorf("held %d bytes, more than the bound %d", st.MaxBuffered, st.Bound)
	}
	if st.MaxBuffered < st.Bound/2 {
		t.Errorf("held at most %d bytes: the fast streams never filled the buffer, the test tests nothing", st.MaxBuffered)
	}
}

// TestBackpressure: a Reader whose application does not read stops
// reading its connections at the bound, and the Writer's Write blocks.
// In a synctest bubble (net.Pipe: in memory) the stall is exact: every
// goroutine blocked, not a guess of how long it takes to fill up.
func TestBackpressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{BlockSize: 64 << 10, SendQueue: 256 << 10}
		var wc, rc []net.Conn
		for range 3 {
			a, b := net.Pipe()
			wc, rc = append(wc, a), append(rc, b)
		}
		w, r := NewWriter(cfg, wc...), NewReader(cfg, rc...)
		defer r.Close()
		sent := randomData(rand.New(rand.NewPCG(7, 8)), 24<<20)
		werr := make(chan error, 1)
		go func() {
			_, err := w.Write(sent)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			werr <- err
		}()
		synctest.Wait() // stalled: everything blocked
		st, ws := r.Stats(), w.Stats()
		t.Logf("stalled: reader holds %d of %d bytes, writer sent %d, queued %d blocks", st.Buffered, st.Bound, ws.Written, ws.Queued)
		if st.Buffered > st.Bound || st.Received > int64(st.Bound) {
			t.Errorf("reader received %d bytes, holds %d, bound %d", st.Received, st.Buffered, st.Bound)
		}
		if ws.Written > int64(st.Bound)+3*64<<10 {
			t.Errorf("writer sent %d bytes to a reader that holds at most %d", ws.Written, st.Bound)
		}
		select {
		case err := <-werr:
			t.Fatalf("writer finished against a stalled reader: %v", err)
		default:
		}
		res := wait(t, readAll(r), "reader")
		if res.err != nil {
			t.Fatal(res.err)
		}
		sameData(t, res.data, sent)
		if err := wait(t, werr, "writer"); err != nil {
			t.Fatal(err)
		}
	})
}

func TestReaderClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := rawStreams(t, Config{}, 2)
		got := readAll(r)
		synctest.Wait() // the reader waits for data
		r.Close()
		if res := wait(t, got, "reader"); !errors.Is(res.err, ErrClosed) {
			t.Fatalf("Read after Close: %v", res.err)
		}
		if err := r.AddStream(nil); !errors.Is(err, ErrClosed) {
			t.Fatalf("AddStream after Close: %v", err)
		}
	})
}

// A retire block tells Config.Retired which connection the sender
// retired; the stream goes on over the others.
func TestRetiredHook(t *testing.T) {
	retired := make(chan net.Conn, 2)
	var conns []net.Conn
	var ends []net.Conn
	for range 2 {
		a, b := net.Pipe()
		ends, conns = append(ends, a), append(conns, b)
	}
	r := NewReader(Config{Retired: func(c net.Conn) { retired <- c }}, conns...)
	t.Cleanup(func() {
		for _, e := range ends {
			e.Close()
		}
		r.Close()
	})
	send(ends[0], data(0, "ab"), AppendBlock(nil, Header{Kind: KindRetire}, nil))
	if c := wait(t, retired, "the retire hook"); c != conns[0] {
		t.Fatalf("retired %v, want the first connection", c)
	}
	send(ends[1], data(2, "cd"), end(4))
	got := wait(t, readAll(r), "the stream")
	if got.err != nil || string(got.data) != "abcd" {
		t.Fatalf("read %q, %v; want abcd", got.data, got.err)
	}
	select {
	case c := <-retired:
		t.Fatalf("the end block also called the hook (%v)", c)
	default:
	}
}

// cut returns a copy of the data block b without its last n bytes.
func cut(b []byte, n int) []byte {
	b = bytes.Clone(b[:len(b)-n])
	binary.BigEndian.PutUint32(b[12:], uint32(len(b)-HeaderSize))
	return b
}

// Compressed blocks decode, whatever the Reader's own setting.
func TestCompressedBlocks(t *testing.T) {
	text := TextData(4, 10000)
	r, ends := rawStreams(t, Config{Compression: CompressOff}, 2)
	send(ends[0], compressed(codecS2, 0, text[:6000]), data(9000, string(text[9000:])), end(10000))
	send(ends[1], compressed(codecZstd, 6000, text[6000:9000]), end(10000))
	res := wait(t, readAll(r), "reader")
	if res.err != nil {
		t.Fatal(res.err)
	}
	sameData(t, res.data, text)
	st := r.Stats()
	if st.Blocks != (CodecBlocks{None: 1, S2: 1, Zstd: 1}) || st.Received != 10000 || st.Wire >= 10000 {
		t.Errorf("stats %+v", st)
	}
}

func TestBadCompressedBlocks(t *testing.T) {
	text := TextData(5, 3000)
	s2b, zb := compressed(codecS2, 0, text), compressed(codecZstd, 0, text)
	wireLen := len(s2b) - HeaderSize
	for _, tc := range []struct {
		name  string
		block []byte
		want  string
	}{
		{"decoded over MaxBlock", setPrefix(s2b, MaxBlock+1), "decodes to 1048577 bytes, want 1 to 1048576"},
		{"decoded nothing", setPrefix(zb, 0), "decodes to 0 bytes"},
		{"not smaller", setPrefix(s2b, wireLen), "compressed, not smaller"},
		{"s2 size mismatch", setPrefix(s2b, 3001), "s2 data of 3000 bytes, the block says 3001"},
		{"zstd says more", setPrefix(zb, 3001), "zstd data of 3000 bytes, the block says 3001"},
		{"zstd says less", setPrefix(zb, 2999), "zstd data of more than the 2999 bytes the block says"},
		{"s2 cut short", cut(s2b, 10), "corrupt s2 data"},
		{"zstd cut short", cut(zb, 10), "corrupt zstd data"},
		{"zstd window", zstdWindowBlock(0, 13, text[:200]), "zstd window too large"},
		{"both codecs", hdr(Header{Kind: KindData, Flags: FlagS2 | FlagZstd, Length: 100}), "both codec flags"},
		{"unknown flag", hdr(Header{Kind: KindData, Flags: 0x10, Length: 100}), "unknown or reserved bits"},
		{"no room for the size", hdr(Header{Kind: KindData, Flags: FlagZstd, Length: 4}), "zstd data block of 4 bytes, want at least 5"},
		{"decoded beyond any stream", compressed(codecS2, math.MaxInt64-2000, text), "beyond any stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ends := rawStreams(t, Config{}, 1)
			send(ends[0], tc.block, end(3000))
			protocolError(t, r, "stream 0", tc.want)
		})
	}
}
