package hub

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/gridlink/gridlink/wire"
)

// A hub holds thousands of idle nodes' trunks, each with a reader waiting
// for its next frame: while it waits it holds no pooled read buffer, only
// its own small one (readbuf.go), and no payload buffer (wire's
// bodypool.go). 2,000 trunks' readers that each read a ping and a control
// message of 300 bytes and now wait hold under 6 KiB each with their
// pipes and goroutines' heap: 3.9 KiB (with bufio's 8 KiB buffer each:
// 11.6 KiB).
func TestIdleTrunkReadersHoldSmallBuffers(t *testing.T) {
	ping := wire.Append(nil, wire.TPing, 0, make([]byte, 8))
	control := wire.Append(nil, wire.TControl, 0, bytes.Repeat([]byte("x"), 300))
	idleReaders(t, 2000, 6<<10, ping, control)
}

// The same after a burst of data: 500 trunks whose readers each read a
// 64 KiB data frame, then a ping, and now wait hold under 6 KiB each
// (their wire.Reader's payload buffer grew to the largest frame and was
// kept: over 70 KiB each).
func TestOnceBusyTrunkReadersHoldSmallBuffers(t *testing.T) {
	data := wire.Append(nil, wire.TData, 1, make([]byte, MaxData))
	ping := wire.Append(nil, wire.TPing, 0, make([]byte, 8))
	idleReaders(t, 500, 6<<10, data, ping)
}

// idleReaders starts trunks readers that each read frames (each a
// frame's bytes) and then wait, and fails unless they hold at most bound
// bytes of heap each.
func idleReaders(t *testing.T, trunks int, bound int64, frames ...[]byte) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	read := make(chan error, trunks)
	var wg sync.WaitGroup
	defer wg.Wait() // the next test measures from a clean heap
	for range trunks {
		a, b := net.Pipe()
		defer b.Close()
		defer a.Close()
		r := NewFrameReader(a)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; ; i++ {
				if _, err := r.Read(); err != nil {
					return
				}
				if i == len(frames) {
					read <- nil // every frame read: from now on it waits
				}
			}
		}()
		go func() {
			for _, f := range frames {
				if _, err := b.Write(f); err != nil {
					read <- err
					return
				}
			}
		}()
	}
	for range trunks {
		if err := <-read; err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.GC() // pooled buffers (returned, so free to take) outlive one
	runtime.ReadMemStats(&ms)
	grew := int64(ms.HeapAlloc) - int64(before)
	t.Logf("%d idle trunk readers: heap grew %d KiB, %.2f KiB a trunk", trunks, grew>>10, float64(grew)/1024/float64(trunks))
	if grew > bound*int64(trunks) {
		t.Errorf("%d idle trunk readers hold %d KiB: %.2f KiB each, want at most %.1f", trunks, grew>>10, float64(grew)/1024/float64(trunks), float64(bound)/1024)
	}
}

// frameStream is a stream of frames as a busy trunk receives them: small
// control frames in runs, windows, and data frames of every size up to
// MaxData, some above the pooled buffer's size.
func frameStream(rng *rand.Rand, frames int) ([]byte, []wire.Frame) {
	var stream []byte
	var want []wire.Frame
	for i := range frames {
		var f wire.Frame
		switch rng.IntN(4) {
		case 0:
			f = wire.Frame{Type: wire.TControl, Payload: bytes.Repeat([]byte{byte(i)}, rng.IntN(600))}
		case 1:
			f = wire.Frame{Type: wire.TWindow, Circuit: 3, Payload: wire.WindowPayload(uint32(i + 1))}
		case 2:
			f = wire.Frame{Type: wire.TData, Circuit: 5, Payload: bytes.Repeat([]byte{byte(i)}, rng.IntN(MaxData+1))}
		default:
			f = wire.Frame{Type: wire.TData, Circuit: 7, Payload: bytes.Repeat([]byte{byte(i)}, rng.IntN(2*idleRead))}
		}
		stream = wire.Append(stream, f.Type, f.Circuit, f.Payload)
		want = append(want, f)
	}
	return stream, want
}

// chunked reads from b in pieces of random sizes, as a TCP stream arrives.
type chunked struct {
	b   []byte
	rng *rand.Rand
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.b), 1+c.rng.IntN(3*readBuffer))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

// A trunk's reader returns the frames sent, whatever sizes the stream
// arrives in, and gives its pooled buffer back once the frames in it are
// read: after a burst, a reader waiting for the next frame holds none.
func TestLeanReaderFrames(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	stream, want := frameStream(rng, 3000)
	lr := &leanReader{c: &chunked{b: stream, rng: rng}}
	r := wire.NewReader(lr)
	borrowed := 0
	for i, w := range want {
		f, err := r.Read()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.Type != w.Type || f.Circuit != w.Circuit || !bytes.Equal(f.Payload, w.Payload) {
			t.Fatalf("frame %d: got %v, want %v", i, f, w)
		}
		if lr.big != nil {
			borrowed++
		}
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
	if lr.big != nil {
		t.Error("a reader at the end of its stream holds a pooled buffer")
	}
	if borrowed == 0 {
		t.Error("a busy stream never borrowed a pooled buffer")
	}
	t.Logf("%d frames, %d read while a pooled buffer was held", len(want), borrowed)

	// Reads of every size, as io.Reader's contract wants them.
	if err := iotest.TestReader(&leanReader{c: bytes.NewReader(stream)}, stream); err != nil {
		t.Error(err)
	}
	if err := iotest.TestReader(&leanReader{c: iotest.OneByteReader(bytes.NewReader(stream[:5000]))}, stream[:5000]); err != nil {
		t.Error(err)
	}
}

// A read that returns bytes and an error gives the bytes first and the
// error on the next read, as bufio does.
func TestLeanReaderDataThenError(t *testing.T) {
	frame := wire.Append(nil, wire.TPing, 0, make([]byte, 8))
	r := wire.NewReader(&leanReader{c: iotest.DataErrReader(bytes.NewReader(frame))})
	if f, err := r.Read(); err != nil || f.Type != wire.TPing {
		t.Fatalf("got %v, %v; want the ping", f, err)
	}
	if _, err := r.Read(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the ping: %v, want EOF", err)
	}
}

// FuzzLeanReader reads arbitrary bytes, arriving in arbitrary pieces,
// through a trunk's reader: it decodes the frames and the error that
// reading them whole does.
func FuzzLeanReader(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	stream, _ := frameStream(rng, 40)
	f.Add(stream, uint64(1))
	f.Add(wire.Append(wire.Append(nil, wire.TPing, 0, make([]byte, 8)), wire.TControl, 0, []byte(`{"kind":"hello"}`)), uint64(7))
	f.Add(append(wire.Append(nil, wire.TData, 1, make([]byte, 9000)), 4, 0), uint64(2))
	f.Fuzz(func(t *testing.T, b []byte, seed uint64) {
		whole := wire.NewReader(bytes.NewReader(b))
		lean := wire.NewReader(&leanReader{c: &chunked{b: b, rng: rand.New(rand.NewPCG(seed, seed))}})
		for i := 0; ; i++ {
			fw, errw := whole.Read()
			fl, errl := lean.Read()
			if (errw == nil) != (errl == nil) || errw != nil && errw.Error() != errl.Error() {
				t.Fatalf("frame %d: error %v read whole, %v through the trunk's reader", i, errw, errl)
			}
			if errw != nil {
				return
			}
			if fw.Type != fl.Type || fw.Flags != fl.Flags || fw.Circuit != fl.Circuit || !bytes.Equal(fw.Payload, fl.Payload) {
				t.Fatalf("frame %d: %v read whole, %v through the trunk's reader", i, fw, fl)
			}
		}
	})
}
