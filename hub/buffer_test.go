package hub

import (
	"bytes"
	"testing"
)

// A circuit's receive buffer gives back, in order, what was copied into
// its chunks and what it holds as kept payloads, and reads a kept
// payload from the buffer it was read into (no copy on the way in).
func TestChunkBufKept(t *testing.T) {
	var b chunkBuf
	var want []byte
	small := bytes.Repeat([]byte{1}, 100)
	b.Write(small)
	want = append(want, small...)
	body, payload := keptFrame(t, 40<<10)
	b.WriteKept(body, len(payload))
	want = append(want, payload...)
	big := bytes.Repeat([]byte{3}, chunkSize+10) // spans two chunks
	b.Write(big)
	want = append(want, big...)
	if b.Len() != len(want) {
		t.Fatalf("holds %d bytes, want %d", b.Len(), len(want))
	}
	if len(b.pieces) != 4 || &b.pieces[1].b[0] != &payload[0] {
		t.Fatalf("%d pieces; the kept payload is not held in its own buffer", len(b.pieces))
	}
	var got []byte
	p := make([]byte, 7000)
	for b.Len() > 0 {
		n := b.Read(p)
		got = append(got, p[:n]...)
	}
	if !bytes.Equal(got, want) || b.pieces != nil {
		t.Fatalf("read %d bytes (equal %v), %d pieces left", len(got), bytes.Equal(got, want), len(b.pieces))
	}
	body, payload = keptFrame(t, 5000)
	b.WriteKept(body, len(payload))
	b.Write(small)
	b.Reset()
	if b.Len() != 0 || b.pieces != nil {
		t.Fatal("Reset left bytes")
	}
}
