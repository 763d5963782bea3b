package exec

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// slowWriter takes at most max bytes a write, and counts the writes.
type slowWriter struct {
	bytes.Buffer
	max, writes int
}

func (w *slowWriter) Write(p []byte) (int, error) {
	w.writes++
	if len(p) > w.max {
		n, _ := w.Buffer.Write(p[:w.max])
		return n, io.ErrShortWrite
	}
	return w.Buffer.Write(p)
}

// gather is byte-exact across the ring's wrap, reads of any size, and
// src's end; a failed write is the writer's error, a failed read src's.
func TestGather(t *testing.T) {
	in := make([]byte, 3*gatherSize+12345)
	_, _ = rand.Read(in)
	for _, r := range []io.Reader{bytes.NewReader(in), iotest.OneByteReader(bytes.NewReader(in[:100000])), iotest.HalfReader(bytes.NewReader(in))} {
		var out bytes.Buffer
		if err := gather(&out, r); err != nil {
			t.Fatal(err)
		}
		if want := in[:out.Len()]; out.Len() < 100000 || !bytes.Equal(out.Bytes(), want) {
			t.Fatalf("%d bytes out, not what went in", out.Len())
		}
	}
	w := &slowWriter{max: 1000}
	err := gather(w, bytes.NewReader(in))
	var we writerError
	if !errors.As(err, &we) || !errors.Is(err, io.ErrShortWrite) || !bytes.Equal(w.Bytes(), in[:w.Len()]) {
		t.Errorf("a failed write: %v after %d bytes", err, w.Len())
	}
	cut := errors.New("cut")
	var out bytes.Buffer
	err = gather(&out, io.MultiReader(bytes.NewReader(in[:5000]), iotest.ErrReader(cut)))
	if !errors.Is(err, cut) || errors.As(err, &we) || !bytes.Equal(out.Bytes(), in[:5000]) {
		t.Errorf("a failed read: %v, %d bytes out", err, out.Len())
	}
}
