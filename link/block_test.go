package link

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
)

func TestParseHeader(t *testing.T) {
	good := []Header{
		{Kind: KindData, Offset: 0, Length: 1},
		{Kind: KindData, Offset: 1 << 40, Length: MaxBlock},
		{Kind: KindEnd, Offset: 12345},
		{Kind: KindEnd, Flags: FlagAbort, Length: MaxReason},
		{Kind: KindRetire},
		{Kind: KindAck},
		{Kind: KindAck, Offset: 1<<63 - 1},
		{Kind: KindAck, Flags: FlagFinal, Offset: 77},
		{Kind: KindData, Flags: FlagS2, Length: lenPrefix + 1},
		{Kind: KindData, Flags: FlagZstd, Offset: 99, Length: MaxBlock},
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
		"kind 5":          hdr(Header{Kind: 5}),
		"ack payload":     hdr(Header{Kind: KindAck, Offset: 3, Length: 1}),
		"ack flag":        hdr(Header{Kind: KindAck, Flags: FlagAbort}),
		"huge ack":        hdr(Header{Kind: KindAck, Offset: 1 << 63}),
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
		"both codecs":     hdr(Header{Kind: KindData, Flags: FlagS2 | FlagZstd, Length: 100}),
		"unknown codec":   hdr(Header{Kind: KindData, Flags: 0x08, Length: 100}),
		"codec and abort": hdr(Header{Kind: KindData, Flags: FlagS2 | FlagAbort, Length: 100}),
		"short s2":        hdr(Header{Kind: KindData, Flags: FlagS2, Length: lenPrefix}),
		"short zstd":      hdr(Header{Kind: KindData, Flags: FlagZstd, Length: 1}),
		"codec on end":    hdr(Header{Kind: KindEnd, Flags: FlagZstd}),
		"codec on retire": hdr(Header{Kind: KindRetire, Flags: FlagS2}),
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
	f.Add(hdr(Header{Kind: KindAck, Offset: 1 << 20}))
	f.Add(hdr(Header{Kind: KindAck, Offset: 1 << 63}))
	f.Add(hdr(Header{Kind: KindAck, Offset: 5, Length: 1}))
	f.Add(hdr(Header{Kind: KindAck, Flags: FlagFinal, Offset: 5}))
	f.Add(hdr(Header{Kind: KindAck, Flags: FlagFinal | FlagAbort, Offset: 5}))
	f.Add(hdr(Header{Kind: KindData, Length: MaxBlock + 1}))
	f.Add(hdr(Header{Kind: KindData, Flags: FlagS2, Offset: 3, Length: 40}))
	f.Add(hdr(Header{Kind: KindData, Flags: FlagZstd, Length: 5}))
	f.Add(hdr(Header{Kind: KindData, Flags: FlagS2 | FlagZstd, Length: 40}))
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
		if h.Kind == KindAck && (h.Length != 0 || h.Offset > 1<<63-1) {
			t.Fatalf("accepted %v", h)
		}
		if h.Flags != 0 && (h.Kind == KindRetire || h.Kind == KindAck && h.Flags != FlagFinal || h.Kind == KindEnd && h.Flags != FlagAbort ||
			h.Kind == KindData && (h.Flags != FlagS2 && h.Flags != FlagZstd || h.Length <= lenPrefix)) {
			t.Fatalf("accepted flags %#x on %v", h.Flags, h)
		}
		if again := hdr(h); !bytes.Equal(again, b[:HeaderSize]) {
			t.Fatalf("%x re-encodes as %x", b[:HeaderSize], again)
		}
	})
}

// FuzzReader feeds arbitrary bytes to a Reader as one connection: it
// returns an error or a stream of exactly the announced length, and never
// more than the data blocks it was given declare (their lengths, or the
// decoded lengths of compressed ones).
func FuzzReader(f *testing.F) {
	f.Add(append(data(0, "hello"), end(5)...))
	f.Add(append(append(data(5, "world"), data(0, "hello")...), end(10)...))
	f.Add(append(data(0, "hello"), AppendBlock(nil, Header{Kind: KindEnd, Flags: FlagAbort}, []byte("why"))...))
	f.Add(append(data(0, "hello"), AppendBlock(nil, Header{Kind: KindRetire}, nil)...))
	f.Add(append(data(0, "hello"), end(4)...))
	f.Add(data(0, "cut")[:HeaderSize+1])
	f.Add(append(append(data(0, "hello"), ack(3, 0)...), end(5)...)) // not resumable: refused
	text := TextData(1, 3000)
	for _, c := range []codec{codecS2, codecZstd} {
		z := compressed(c, 0, text)
		f.Add(append(z, end(uint64(len(text)))...))
		f.Add(append(append(data(0, "hi"), compressed(c, 2, text[:500])...), end(502)...))
		f.Add(append(z[:len(z)-7], end(uint64(len(text)))...))              // cut short
		f.Add(append(setPrefix(z, len(text)+1), end(uint64(len(text)))...)) // says more than it holds
		f.Add(append(setPrefix(z, MaxBlock+1), end(MaxBlock+1)...))
		bad := bytes.Clone(z)
		bad[len(bad)/2] ^= 0x55
		f.Add(append(bad, end(uint64(len(text)))...))
	}
	f.Add(append(zstdWindowBlock(0, 13, []byte("hello, world, hello, world")), end(26)...))
	f.Fuzz(fuzzReader)
}

func fuzzReader(t *testing.T, b []byte) {
	a, c := net.Pipe()
	r := NewReader(Config{}, c)
	defer r.Close()
	wrote := make(chan struct{})
	go func() {
		_, _ = a.Write(b)
		a.Close()
		close(wrote)
	}()
	got := readAll(r)
	var last ReaderStats
	still := 0
	for {
		select {
		case res := <-got:
			var h Header
			declared := 0
			for p := b; len(p) >= HeaderSize; {
				h, _ = ParseHeader(p)
				if h.Kind == KindEnd {
					break
				}
				if h.Kind == KindData {
					declared += int(h.Length)
					if h.Flags != 0 && len(p) >= HeaderSize+lenPrefix {
						declared += int(binary.BigEndian.Uint32(p[HeaderSize:]))
					}
				}
				p = p[min(len(p), HeaderSize+int(h.Length)):]
			}
			if res.err == nil && (h.Kind != KindEnd || h.Offset != uint64(len(res.data))) {
				t.Fatalf("EOF after %d bytes, the stream's end says %v", len(res.data), h)
			}
			if len(res.data) > declared {
				t.Fatalf("%d bytes out of blocks declaring %d", len(res.data), declared)
			}
			return
		case <-time.After(time.Millisecond):
			st := r.Stats()
			if st.Streams == 0 { // retired: nothing more will come
				r.Close()
			}
			select {
			case <-wrote:
			default:
				// Compressed blocks can fill the reorder buffer with a
				// few bytes, past a gap that only another stream could
				// fill: the Reader rightly stops reading, and the
				// sender is stuck.
				if still++; st != last {
					last, still = st, 0
				} else if still > 20 {
					r.Close()
				}
			}
		}
	}
}

// FuzzDecompress decodes arbitrary codec bytes against a declared size:
// an error, or exactly that many bytes in the given buffer.
func FuzzDecompress(f *testing.F) {
	text := TextData(2, 2000)
	for _, c := range []codec{codecS2, codecZstd} {
		p := compress(c, make([]byte, compressedCap(len(text))), text)
		f.Add(byte(c), uint32(len(text)), p[lenPrefix:])
		f.Add(byte(c), uint32(len(text)-1), p[lenPrefix:])
		f.Add(byte(c), uint32(len(text)+1), p[lenPrefix:len(p)-3])
	}
	f.Add(byte(codecZstd), uint32(26+64), zstdWindowBlock(0, 13, []byte("hello, world, hello, world"))[HeaderSize+lenPrefix:])
	f.Fuzz(func(t *testing.T, c byte, n uint32, src []byte) {
		if c != byte(codecS2) && c != byte(codecZstd) || n == 0 || n > MaxBlock {
			return
		}
		dst := make([]byte, n)
		if err := decompress(codec(c), dst, src); err != nil {
			return
		}
		var want []byte
		var err error
		if codec(c) == codecS2 {
			want, err = s2.Decode(nil, src)
		} else {
			want, err = decoderZstd().DecodeAll(src, make([]byte, 0, n))
		}
		if err != nil || !bytes.Equal(want, dst) {
			t.Fatalf("decoded %d bytes that the codec decodes as %d (%v)", len(dst), len(want), err)
		}
	})
}

// compressed returns a data block at off with p compressed by c.
func compressed(c codec, off uint64, p []byte) []byte {
	payload := compress(c, make([]byte, compressedCap(len(p))), p)
	if payload == nil {
		panic("does not compress")
	}
	return AppendBlock(nil, Header{Kind: KindData, Flags: c.flag(), Offset: off}, payload)
}

// setPrefix returns a copy of the compressed block b declaring n decoded
// bytes.
func setPrefix(b []byte, n int) []byte {
	b = bytes.Clone(b)
	binary.BigEndian.PutUint32(b[HeaderSize:], uint32(n))
	return b
}

// zstdWindowBlock returns a zstd data block at off holding p in a frame
// that asks for a window of 2^(10+exp) bytes (made by hand: no content
// size, one raw block).
func zstdWindowBlock(off uint64, exp byte, p []byte) []byte {
	frame := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, exp << 3}
	bh := uint32(len(p))<<3 | 1 // last, raw
	frame = append(frame, byte(bh), byte(bh>>8), byte(bh>>16))
	frame = append(frame, p...)
	payload := binary.BigEndian.AppendUint32(nil, uint32(len(p)+64)) // more than on the wire
	return AppendBlock(nil, Header{Kind: KindData, Flags: FlagZstd, Offset: off}, append(payload, frame...))
}
