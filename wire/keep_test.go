package wire

import (
	"bytes"
	"testing"
)

// A kept payload stays as it was read while the Reader reads on (a hub
// forwards it from the queue of another trunk), and only a pooled one is
// kept: a small payload lives in the Reader and is nil to Keep.
func TestFrameKeep(t *testing.T) {
	one, two := bytes.Repeat([]byte{1}, 5000), bytes.Repeat([]byte{2}, 5000)
	var b []byte
	b = Append(b, TData, 7, one)
	b = Append(b, TData, 7, two)
	b = Append(b, TWindow, 7, WindowPayload(1))
	r := NewReader(bytes.NewReader(b))
	f, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	kept := f.Keep()
	if kept == nil || !bytes.Equal((*kept)[:len(f.Payload)], one) {
		t.Fatalf("kept %v", kept)
	}
	if again := f.Keep(); again != nil {
		t.Fatal("a payload's buffer was kept twice")
	}
	g, err := r.Read()
	if err != nil || !bytes.Equal(g.Payload, two) {
		t.Fatalf("second frame %v, %v", g, err)
	}
	if !bytes.Equal((*kept)[:len(one)], one) {
		t.Fatal("the next Read wrote into the kept payload")
	}
	if &(*kept)[0] == &g.Payload[0] {
		t.Fatal("the next frame was read into the kept buffer")
	}
	PutBody(kept)
	w, err := r.Read()
	if err != nil || w.Keep() != nil {
		t.Fatalf("a window frame's payload (in the Reader) was kept: %v, %v", w, err)
	}
	if (Frame{Type: TData, Payload: one}).Keep() != nil {
		t.Fatal("kept the payload of a frame not from a Reader")
	}
}
