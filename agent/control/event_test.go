package control

import (
	"bytes"
	"strings"
	"testing"
)

func FuzzEvent(f *testing.F) {
	f.Add(AppendEvent(nil, Event{Bound: "alpha:49152"}))
	f.Add(AppendEvent(nil, Event{Error: "x", Kind: KindRefused}))
	f.Add(AppendEvent(nil, Event{Service: "web"}))
	f.Add([]byte("{}\n"))
	f.Add([]byte("{\"peer\":1}\n"))
	f.Add(bytes.Repeat([]byte(" "), MaxEventLine+1))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		ev, err := ReadEvent(r)
		if err != nil {
			return
		}
		used := len(b) - r.Len()
		if used > MaxEventLine || b[used-1] != '\n' || bytes.IndexByte(b[:used-1], '\n') >= 0 {
			t.Fatalf("read %d bytes of %q", used, b)
		}
		again, err := ReadEvent(bytes.NewReader(AppendEvent(nil, ev)))
		if err != nil || again != ev {
			t.Fatalf("%+v does not round-trip: %+v %v", ev, again, err)
		}
	})
}

func TestEventClipped(t *testing.T) {
	b := AppendEvent(nil, Event{Error: strings.Repeat("é", 2000), Kind: KindFailed})
	if len(b) > MaxEventLine {
		t.Fatalf("event of %d bytes", len(b))
	}
	if _, err := ReadEvent(bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
}
