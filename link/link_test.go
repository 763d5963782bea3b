package link

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"
)

// TestStriping is the property test: random data of random sizes (random
// bytes, text or both in turns) over 1 to 8 streams of random kinds and
// speeds, with any Compression, streams added and removed while data
// flows, arrives whole and in order.
func TestStriping(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	pairs := newPairs(t)
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	for round := range rounds {
		size := []int{0, 1, rng.IntN(1000), rng.IntN(1 << 20), rng.IntN(6 << 20)}[rng.IntN(5)]
		if round == 0 {
			size = 6 << 20
		}
		cfg := Config{BlockSize: 1 + rng.IntN(300<<10), SendQueue: rng.IntN(2 << 20), ReorderBuffer: rng.IntN(8 << 20),
			Compression: Compression(rng.IntN(4))}
		n := 1 + rng.IntN(8)
		var wc, rc []net.Conn
		for range n {
			w, r := pairs.random(rng)
			wc, rc = append(wc, w), append(rc, r)
		}
		sent := mixedData(rng, size)
		w, r := NewWriter(cfg, wc...), NewReader(cfg, rc...)
		got := readAll(r)
		errc := make(chan error, 1)
		changes := 0
		go func() {
			live, p := wc, sent
			for len(p) > 0 {
				k := min(len(p), 1+rng.IntN(512<<10))
				if _, err := w.Write(p[:k]); err != nil {
					errc <- err
					return
				}
				p = p[k:]
				switch rng.IntN(4) {
				case 0: // add a stream
					if len(live) < 8 {
						a, b := pairs.random(rng)
						if err := w.AddStream(a); err != nil {
							errc <- err
							return
						}
						if err := r.AddStream(b); err != nil {
							errc <- err
							return
						}
						live = append(live, a)
						changes++
					}
				case 1: // retire one
					if len(live) > 1 {
						i := rng.IntN(len(live))
						if err := w.RemoveStream(live[i]); err != nil {
							errc <- err
							return
						}
						live = append(live[:i], live[i+1:]...)
						changes++
					}
				}
			}
			errc <- w.Close()
		}()
		if err := wait(t, errc, "writer"); err != nil {
			t.Fatalf("round %d: writer: %v", round, err)
		}
		res := wait(t, got, "reader")
		if res.err != nil {
			t.Fatalf("round %d: reader: %v", round, res.err)
		}
		sameData(t, res.data, sent)
		st := r.Stats()
		if st.MaxBuffered > st.Bound {
			t.Errorf("round %d: reorder buffer held %d bytes, bound %d", round, st.MaxBuffered, st.Bound)
		}
		r.Close()
		ws := w.Stats()
		if ws.Written != int64(size) || st.Wire != ws.Wire || st.Blocks != ws.Blocks {
			t.Errorf("round %d: writer sent %d bytes as %d on the wire in %+v; reader got %d in %+v",
				round, ws.Written, ws.Wire, ws.Blocks, st.Wire, st.Blocks)
		}
		t.Logf("round %d: %d bytes (%d on the wire, %s), %d streams, %d added or removed, block %d, reorder max %d of %d",
			round, size, ws.Wire, cfg.Compression, n, changes, cfg.BlockSize, st.MaxBuffered, st.Bound)
	}
}

// TestFastStreamTakesMore checks the striping's point: a slow stream
// carries fewer blocks than a fast one.
func TestFastStreamTakesMore(t *testing.T) {
	a1, b1 := net.Pipe()
	a2, b2 := net.Pipe()
	slow := &slowConn{Conn: a2, delay: 5 * time.Millisecond, chunk: 1 << 20}
	w := NewWriter(Config{BlockSize: 16 << 10, SendQueue: 64 << 10}, a1, slow)
	r := NewReader(Config{}, b1, b2)
	defer r.Close()
	sent := randomData(rand.New(rand.NewPCG(1, 2)), 4<<20)
	got := readAll(r)
	if _, err := w.Write(sent); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	res := wait(t, got, "reader")
	if res.err != nil {
		t.Fatal(res.err)
	}
	sameData(t, res.data, sent)
	st := w.Stats()
	fast, slowN := st.Streams[0].Blocks, st.Streams[1].Blocks
	t.Logf("fast stream %d blocks, slow stream %d", fast, slowN)
	if fast <= slowN {
		t.Errorf("the fast stream sent %d blocks, the slow one %d", fast, slowN)
	}
}

// kill runs a transfer over three streams and breaks stream 1 once the
// reader has some bytes; the Reader must fail naming it, short of the end.
func kill(t *testing.T, breakIt func(w, r net.Conn)) {
	p := newPairs(t)
	var wc, rc []net.Conn
	for i := range 3 {
		a, b := p.tcp()
		if i == 1 {
			a = &slowConn{Conn: a, delay: 2 * time.Millisecond, chunk: 32 << 10}
		}
		wc, rc = append(wc, a), append(rc, b)
	}
	w := NewWriter(Config{BlockSize: 64 << 10}, wc...)
	r := NewReader(Config{}, rc...)
	defer r.Close()
	sent := randomData(rand.New(rand.NewPCG(3, 4)), 32<<20)
	werr := make(chan error, 1)
	go func() {
		_, err := w.Write(sent)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		werr <- err
	}()
	buf := make([]byte, 1<<20)
	if _, err := io.ReadFull(r, buf); err != nil {
		t.Fatal(err)
	}
	breakIt(wc[1], rc[1])
	res := wait(t, readAll(r), "reader")
	total := len(buf) + len(res.data)
	switch {
	case res.err == nil:
		t.Fatalf("clean EOF after %d of %d bytes", total, len(sent))
	case total >= len(sent):
		t.Fatalf("all %d bytes, then %v", total, res.err)
	case errors.Is(res.err, io.EOF):
		t.Fatalf("error wraps io.EOF: %v", res.err)
	case !strings.Contains(res.err.Error(), "stream 1"):
		t.Fatalf("error does not name stream 1: %v", res.err)
	}
	sameData(t, append(buf, res.data...), sent[:total])
	t.Logf("after %d of %d bytes: %v", total, len(sent), res.err)
	if err := wait(t, werr, "writer"); err == nil {
		t.Errorf("writer: no error")
	} else {
		t.Logf("writer: %v", err)
	}
}

func TestKillReaderSide(t *testing.T) {
	kill(t, func(_, r net.Conn) { r.Close() })
}

func TestKillWriterSide(t *testing.T) {
	kill(t, func(w, _ net.Conn) { w.(*slowConn).Conn.Close() })
}

// TestCutAtBlockBoundary: a stream that ends cleanly between blocks but
// without an end block is a broken stream, not a short one.
func TestCutAtBlockBoundary(t *testing.T) {
	r, ends := rawStreams(t, Config{}, 2)
	send(ends[0], data(0, "hello")).Wait()
	ends[0].Close()
	res := wait(t, readAll(r), "reader")
	if !strings.HasPrefix("hello", string(res.data)) {
		t.Errorf("received %q", res.data)
	}
	err := res.err
	if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "stream 0") {
		t.Fatalf("got %v, want an unexpected EOF on stream 0", err)
	}
	t.Log(err)
}

// TestLateLossIsNoLoss: a stream that breaks once every byte has arrived
// costs nothing.
func TestLateLossIsNoLoss(t *testing.T) {
	r, ends := rawStreams(t, Config{}, 2)
	send(ends[0], data(0, "hello"), end(5)).Wait()
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "hello" {
		t.Fatalf("%q %v", b, err)
	}
	ends[1].Close()
}

func TestAbort(t *testing.T) {
	a1, b1 := net.Pipe()
	a2, b2 := net.Pipe()
	w, r := NewWriter(Config{}, a1, a2), NewReader(Config{}, b1, b2)
	defer r.Close()
	got := readAll(r)
	if _, err := w.Write([]byte("some bytes")); err != nil {
		t.Fatal(err)
	}
	w.Abort("changed my mind")
	res := wait(t, got, "reader")
	if !errors.Is(res.err, ErrAborted) || !strings.Contains(res.err.Error(), "changed my mind") {
		t.Fatalf("got %v, want an abort", res.err)
	}
	if err := w.Close(); !errors.Is(err, ErrAborted) {
		t.Errorf("Close after Abort: %v", err)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Errorf("Write after Abort succeeded")
	}
}

func TestRemoveLastStream(t *testing.T) {
	a, b := net.Pipe()
	w, r := NewWriter(Config{}, a), NewReader(Config{}, b)
	defer r.Close()
	if err := w.RemoveStream(a); err == nil {
		t.Fatal("removed the last stream")
	}
	got := readAll(r)
	if _, err := w.Write([]byte("still here")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, got, "reader"); res.err != nil || string(res.data) != "still here" {
		t.Fatalf("%q %v", res.data, res.err)
	}
}

func TestCloseWithoutStreams(t *testing.T) {
	w := NewWriter(Config{})
	if _, err := w.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close without streams succeeded")
	}
}
