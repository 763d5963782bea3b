package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// Compression says how a Writer compresses its data blocks. A Reader
// decodes every codec whatever its own Config says.
type Compression uint8

const (
	// CompressOff sends blocks as they are (the default).
	CompressOff Compression = iota
	// CompressS2 compresses every block with S2 (fast, a lower ratio).
	CompressS2
	// CompressZstd compresses every block with zstd at its fastest level
	// (slower than S2, a higher ratio).
	CompressZstd
	// CompressAuto decides per block between no compression, S2 and zstd,
	// from the rate the connections carry, each codec's speed and the
	// data's compressibility (see Writer).
	CompressAuto
)

var compressionNames = [...]string{CompressOff: "off", CompressS2: "s2", CompressZstd: "zstd", CompressAuto: "auto"}

func (c Compression) String() string {
	if int(c) < len(compressionNames) {
		return compressionNames[c]
	}
	return fmt.Sprintf("compression(%d)", uint8(c))
}

// ParseCompression parses "off", "s2", "zstd" or "auto".
func ParseCompression(s string) (Compression, error) {
	for c, name := range compressionNames {
		if strings.EqualFold(s, name) {
			return Compression(c), nil
		}
	}
	return CompressOff, fmt.Errorf("link: unknown compression %q (want off, s2, zstd or auto)", s)
}

// Set parses s as ParseCompression does: *Compression is a command-line
// flag value (flag.Value, and with Type a pflag.Value).
func (c *Compression) Set(s string) error {
	v, err := ParseCompression(s)
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// Type names the flag's kind for pflag's help text.
func (c *Compression) Type() string { return "off|s2|zstd|auto" }

// codec is how one block's payload goes: as it is or by a codec. The
// values index per-codec counters and estimates.
type codec uint8

const (
	codecNone codec = iota
	codecS2
	codecZstd
	numCodecs
)

var codecNames = [numCodecs]string{"none", "s2", "zstd"}

func (c codec) String() string { return codecNames[c] }

// flag is the block flag that marks a payload compressed with c.
func (c codec) flag() uint8 { return [numCodecs]uint8{0, FlagS2, FlagZstd}[c] }

func codecOf(flags uint8) codec {
	switch flags & (FlagS2 | FlagZstd) {
	case FlagS2:
		return codecS2
	case FlagZstd:
		return codecZstd
	}
	return codecNone
}

// lenPrefix is the size of a compressed payload's decoded-length prefix.
const lenPrefix = 4

// compressedCap is the room a compressed payload of a block of n bytes
// may need (S2's bound is the larger; zstd's stored blocks add a few
// bytes to n).
func compressedCap(n int) int { return lenPrefix + max(s2.MaxEncodedLen(n), n+1024) }

// encoderZstd is shared by every Writer: it keeps up to GOMAXPROCS
// encoders, made as they are needed. Its window covers a whole block, so a
// block's frame is one segment with its content size in its header.
var encoderZstd = sync.OnceValue(func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(MaxBlock),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
	if err != nil {
		panic(err) // the options are constant
	}
	return e
})

// decoderZstd is shared by every Reader. Its memory is capped: a frame may
// not ask for a window over MaxBlock, and DecodeAll writes no further than
// the capacity of the buffer it is given (the block's declared size).
var decoderZstd = sync.OnceValue(func() *zstd.Decoder {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(MaxBlock),
		zstd.WithDecoderMaxWindow(MaxBlock), zstd.WithDecodeAllCapLimit(true), zstd.WithDecoderLowmem(true))
	if err != nil {
		panic(err)
	}
	return d
})

// compress encodes raw with c into buf (whose capacity is at least
// compressedCap(len(raw))) as a compressed block's payload: the decoded
// length, then the codec's bytes. It returns the payload, or nil if it
// would not save at least 1/64 of raw (a block barely shrunk is not worth
// decoding).
func compress(c codec, buf, raw []byte) []byte {
	buf = buf[:cap(buf)]
	binary.BigEndian.PutUint32(buf, uint32(len(raw)))
	var enc []byte
	switch c {
	case codecS2:
		enc = s2.Encode(buf[lenPrefix:], raw)
	case codecZstd:
		enc = encoderZstd().EncodeAll(raw, buf[lenPrefix:lenPrefix])
	default:
		return nil
	}
	n := lenPrefix + len(enc)
	if n > len(raw)-len(raw)/64 || n >= len(raw) || len(enc) > 0 && &enc[0] != &buf[lenPrefix] {
		return nil
	}
	return buf[:n]
}

// decodedSize checks the decoded-length prefix of the compressed data
// block h (whose header ParseHeader accepted) and returns the block as it
// is in the stream: its decoded length, no flags.
func decodedSize(h Header, prefix []byte) (Header, error) {
	n := binary.BigEndian.Uint32(prefix)
	switch {
	case n == 0 || n > MaxBlock:
		return Header{}, fmt.Errorf("%w: %s decodes to %d bytes, want 1 to %d", ErrBlock, h, n, MaxBlock)
	case h.Length >= n:
		return Header{}, fmt.Errorf("%w: %s decodes to %d bytes: compressed, not smaller", ErrBlock, h, n)
	case h.Offset > 1<<63-1-uint64(n):
		return Header{}, fmt.Errorf("%w: %s decoding to %d bytes, beyond any stream", ErrBlock, h, n)
	}
	return Header{Kind: KindData, Offset: h.Offset, Length: n}, nil
}

// decompress decodes src, the codec bytes of a block compressed with c
// (after its prefix), into dst, whose length is the declared size. It
// never writes past dst nor allocates the output elsewhere.
func decompress(c codec, dst, src []byte) error {
	switch c {
	case codecS2:
		n, err := s2.DecodedLen(src)
		if err != nil {
			return fmt.Errorf("corrupt s2 data: %w", err)
		}
		if n != len(dst) {
			return fmt.Errorf("s2 data of %d bytes, the block says %d", n, len(dst))
		}
		out, err := s2.Decode(dst, src)
		if err != nil {
			return fmt.Errorf("corrupt s2 data: %w", err)
		}
		if len(out) != len(dst) || &out[0] != &dst[0] {
			return fmt.Errorf("s2 data of %d bytes, the block says %d", len(out), len(dst))
		}
	case codecZstd:
		out, err := decoderZstd().DecodeAll(src, dst[:0])
		switch {
		case errors.Is(err, zstd.ErrWindowSizeExceeded):
			return fmt.Errorf("zstd window too large (at most %d bytes)", MaxBlock)
		case errors.Is(err, zstd.ErrDecoderSizeExceeded):
			return fmt.Errorf("zstd data of more than the %d bytes the block says", len(dst))
		case err != nil:
			return fmt.Errorf("corrupt zstd data: %w", err)
		case len(out) != len(dst):
			return fmt.Errorf("zstd data of %d bytes, the block says %d", len(out), len(dst))
		case &out[0] != &dst[0]:
			return errors.New("zstd decoder wrote outside the block") // WithDecodeAllCapLimit prevents it
		}
	default:
		return errors.New("not compressed")
	}
	return nil
}

// wirePool holds buffers for compressed payloads being read by a Reader.
var wirePool = sync.Pool{New: func() any { b := make([]byte, MaxBlock); return &b }}
