package vip

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"testing/iotest"
)

func frames(pkts ...[]byte) []byte {
	var b []byte
	for _, p := range pkts {
		b = appendFrame(b, p)
	}
	return b
}

func TestFrames(t *testing.T) {
	p1, p2 := ipv4(a4, b4, 17, make([]byte, 30)), ipv6(a6, b6, 17, make([]byte, 1000))
	stream := frames(p1, p2)
	if want := 2 + len(p1) + 2 + len(p2); len(stream) != want || stream[0] != 0 || stream[1] != byte(len(p1)) {
		t.Fatalf("stream of %d bytes starting %x, want %d starting 00%02x", len(stream), stream[:2], want, len(p1))
	}
	r := newFrameReader(bytes.NewReader(stream), readBuffer)
	if r.ready() {
		t.Fatalf("a frame ready before anything was read")
	}
	r.fill() // ready looks at what is buffered only
	var buf []byte
	for i, want := range [][]byte{p1, p2} {
		if !r.ready() {
			t.Fatalf("frame %d not ready with %d bytes buffered", i, r.hi-r.lo)
		}
		var n int
		var err error
		buf, n, err = r.readFrame(buf, 16)
		if err != nil || !bytes.Equal(buf[16:16+n], want) {
			t.Fatalf("frame %d: %d bytes, %v", i, n, err)
		}
	}
	if _, _, err := r.readFrame(buf, 16); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
	// Cut inside a frame; a length below an IP header.
	r = newFrameReader(bytes.NewReader(stream[:10]), readBuffer)
	if _, _, err := r.readFrame(nil, 16); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut frame: %v, want io.ErrUnexpectedEOF", err)
	}
	r = newFrameReader(bytes.NewReader([]byte{0, 19, 1, 2}), readBuffer)
	var fe *FrameError
	if _, _, err := r.readFrame(nil, 16); !errors.Is(err, ErrBadFrame) || !errors.As(err, &fe) || fe.Len != 19 {
		t.Errorf("frame of 19 bytes: %v, want a FrameError", err)
	}
}

func FuzzReadFrames(f *testing.F) {
	f.Add(frames(ipv4(a4, b4, 17, make([]byte, 30)), ipv6(a6, b6, 17, nil)))
	f.Add([]byte{0, 19})
	f.Add([]byte{0xff, 0xff, 1})
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, stream []byte) {
		// One byte at a time: frames read across many fills and reads
		// straight into the packet's buffer.
		r := newFrameReader(iotest.OneByteReader(bytes.NewReader(stream)), 64)
		var buf []byte
		var got [][]byte
		for {
			var n int
			var err error
			buf, n, err = r.readFrame(buf, 16)
			if err != nil {
				var fe *FrameError
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &fe) {
					t.Fatalf("error %v", err)
				}
				break
			}
			if n < minFrame {
				t.Fatalf("accepted a frame of %d bytes", n)
			}
			got = append(got, bytes.Clone(buf[16:16+n]))
		}
		if enc := frames(got...); !bytes.HasPrefix(stream, enc) {
			t.Fatalf("frames read do not encode to the stream's start")
		}
	})
}

// TestFramesWrittenInPlace: a batch of small and large packets (framed
// in place in their buffers, the small ones gathered) reads back whole
// and in order, through a reader whose buffer is smaller than the large
// packets (their rest read straight into the packet's buffer).
func TestFramesWrittenInPlace(t *testing.T) {
	var pkts [][]byte
	var batch []*pbuf
	for i, size := range []int{30, 60000, 1000, 1400, 3000, 20, 65535 - 40} {
		p := ipv4(a4, b4, 17, bytes.Repeat([]byte{byte(i + 1)}, size))
		if len(p) > maxFrame {
			p = p[:maxFrame]
		}
		pkts = append(pkts, p)
		batch = append(batch, copyPacket(p))
	}
	a, b := net.Pipe()
	go func() {
		var w frameWriter
		if err := w.write(a, batch); err != nil {
			t.Error(err)
		}
		a.Close()
	}()
	r := newFrameReader(b, 4096)
	var buf []byte
	for i, want := range pkts {
		var n int
		var err error
		buf, n, err = r.readFrame(buf, 16)
		if err != nil || !bytes.Equal(buf[16:16+n], want) {
			t.Fatalf("packet %d (%d bytes): got %d bytes, %v", i, len(want), n, err)
		}
	}
	if _, _, err := r.readFrame(buf, 16); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}
