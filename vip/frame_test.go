package vip

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

func frames(pkts ...[]byte) []byte {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	for _, p := range pkts {
		writeFrame(w, p)
	}
	w.Flush()
	return b.Bytes()
}

func TestFrames(t *testing.T) {
	p1, p2 := ipv4(a4, b4, 17, make([]byte, 30)), ipv6(a6, b6, 17, make([]byte, 1000))
	stream := frames(p1, p2)
	if want := 2 + len(p1) + 2 + len(p2); len(stream) != want || stream[0] != 0 || stream[1] != byte(len(p1)) {
		t.Fatalf("stream of %d bytes starting %x, want %d starting 00%02x", len(stream), stream[:2], want, len(p1))
	}
	r := bufio.NewReader(bytes.NewReader(stream))
	if frameReady(r) {
		t.Fatalf("a frame ready before anything was read")
	}
	r.Peek(1) // fills the buffer; frameReady looks at what is buffered only
	var buf []byte
	for i, want := range [][]byte{p1, p2} {
		if !frameReady(r) {
			t.Fatalf("frame %d not ready with %d bytes buffered", i, r.Buffered())
		}
		var n int
		var err error
		buf, n, err = readFrame(r, buf, 16)
		if err != nil || !bytes.Equal(buf[16:16+n], want) {
			t.Fatalf("frame %d: %d bytes, %v", i, n, err)
		}
	}
	if _, _, err := readFrame(r, buf, 16); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
	// Cut inside a frame; a length below an IP header.
	r = bufio.NewReader(bytes.NewReader(stream[:10]))
	if _, _, err := readFrame(r, nil, 16); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut frame: %v, want io.ErrUnexpectedEOF", err)
	}
	r = bufio.NewReader(bytes.NewReader([]byte{0, 19, 1, 2}))
	var fe *FrameError
	if _, _, err := readFrame(r, nil, 16); !errors.Is(err, ErrBadFrame) || !errors.As(err, &fe) || fe.Len != 19 {
		t.Errorf("frame of 19 bytes: %v, want a FrameError", err)
	}
}

func FuzzReadFrames(f *testing.F) {
	f.Add(frames(ipv4(a4, b4, 17, make([]byte, 30)), ipv6(a6, b6, 17, nil)))
	f.Add([]byte{0, 19})
	f.Add([]byte{0xff, 0xff, 1})
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(stream), readBuffer)
		var buf []byte
		var got [][]byte
		for {
			var n int
			var err error
			buf, n, err = readFrame(r, buf, 16)
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
