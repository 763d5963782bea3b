package link

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"
)

func TestParseHeader(t *testing.T) {
	good := []Header{
		{Kind: KindData, Offset: 0, Length: 1},
		{Kind: KindData, Offset: 1 << 40, Length: MaxBlock},
		{Kind: KindEnd, Offset: 12345},
		{Kind: KindEnd, Flags: FlagAbort, Length: MaxReason},
		{Kind: KindRetire},
	}
	for _, h := range good {
		var b [HeaderSize]byte
		h.Put(b[:])
		got, err := ParseHeader(b[:])
		if err != nil || got != h {
			t.Errorf("ParseHeader(%v) = %v, %v", h, got, err)
		}
	}
	bad := map[string][]byte{
		"short":           make([]byte, HeaderSize-1),
		"kind 0":          make([]byte, HeaderSize),
		"kind 4":          hdr(Header{Kind: 4}),
		"flag on data":    hdr(Header{Kind: KindData, Flags: FlagAbort, Length: 1}),
		"unknown flag":    hdr(Header{Kind: KindEnd, Flags: 2}),
		"reserved":        append([]byte{byte(KindEnd), 0, 1}, make([]byte, 13)...),
		"empty data":      hdr(Header{Kind: KindData}),
		"oversized data":  hdr(Header{Kind: KindData, Length: MaxBlock + 1}),
		"offset overflow": hdr(Header{Kind: KindData, Offset: 1<<63 - 1, Length: 1}),
		"huge total":      hdr(Header{Kind: KindEnd, Offset: 1 << 63}),
		"end payload":     hdr(Header{Kind: KindEnd, Length: 1}),
		"abort offset":    hdr(Header{Kind: KindEnd, Flags: FlagAbort, Offset: 3}),
		"long reason":     hdr(Header{Kind: KindEnd, Flags: FlagAbort, Length: MaxReason + 1}),
		"retire offset":   hdr(Header{Kind: KindRetire, Offset: 1}),
		"retire length":   hdr(Header{Kind: KindRetire, Length: 1}),
	}
	for name, b := range bad {
		if h, err := ParseHeader(b); !errors.Is(err, ErrBlock) {
			t.Errorf("%s: ParseHeader(%x) = %v, %v; want ErrBlock", name, b, h, err)
		}
	}
}

func hdr(h Header) []byte {
	var b [HeaderSize]byte
	h.Put(b[:])
	return b[:]
}

func FuzzParseHeader(f *testing.F) {
	f.Add(hdr(Header{Kind: KindData, Offset: 7, Length: 100}))
	f.Add(hdr(Header{Kind: KindEnd, Offset: 107}))
	f.Add(hdr(Header{Kind: KindEnd, Flags: FlagAbort, Length: 4}))
	f.Add(hdr(Header{Kind: KindRetire}))
	f.Add(hdr(Header{Kind: KindData, Length: MaxBlock + 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader(b)
		if err != nil {
			if !errors.Is(err, ErrBlock) {
				t.Fatalf("error not wrapping ErrBlock: %v", err)
			}
			return
		}
		// whatever parses is within bounds and re-encodes to the same bytes.
		if h.Kind == KindData && (h.Length == 0 || h.Length > MaxBlock) || h.Length > MaxBlock {
			t.Fatalf("accepted %v", h)
		}
		if again := hdr(h); !bytes.Equal(again, b[:HeaderSize]) {
			t.Fatalf("%x re-encodes as %x", b[:HeaderSize], again)
		}
	})
}

// FuzzReader feeds arbitrary bytes to a Reader as one connection: it
// returns an error or a stream of exactly the announced length, and never
// more than the bytes it was given.
func FuzzReader(f *testing.F) {
	f.Add(append(data(0, "hello"), end(5)...))
	f.Add(append(append(data(5, "world"), data(0, "hello")...), end(10)...))
	f.Add(append(data(0, "hello"), AppendBlock(nil, Header{Kind: KindEnd, Flags: FlagAbort}, []byte("why"))...))
	f.Add(append(data(0, "hello"), AppendBlock(nil, Header{Kind: KindRetire}, nil)...))
	f.Add(append(data(0, "hello"), end(4)...))
	f.Add(data(0, "cut")[:HeaderSize+1])
	f.Fuzz(func(t *testing.T, b []byte) {
		a, c := net.Pipe()
		r := NewReader(Config{}, c)
		defer r.Close()
		go func() {
			_, _ = a.Write(b)
			a.Close()
		}()
		got := readAll(r)
		for {
			select {
			case res := <-got:
				if res.err == nil {
					var h Header
					for p := b; len(p) >= HeaderSize; {
						h, _ = ParseHeader(p)
						if h.Kind == KindEnd {
							break
						}
						p = p[HeaderSize+int(h.Length):]
					}
					if h.Kind != KindEnd || h.Offset != uint64(len(res.data)) {
						t.Fatalf("EOF after %d bytes, the stream's end says %v", len(res.data), h)
					}
				}
				if len(res.data) > len(b) {
					t.Fatalf("%d bytes out of %d in", len(res.data), len(b))
				}
				return
			case <-time.After(time.Millisecond):
				if r.Stats().Streams == 0 { // retired: nothing more will come
					r.Close()
				}
			}
		}
	})
}
