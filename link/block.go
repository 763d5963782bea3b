// Package link stripes one ordered byte stream over several connections,
// as GridFTP's MODE E and NetIbis's parallel streams do: a Writer cuts the
// stream into blocks that carry their offset in the stream and sends each
// on whichever connection can take it, and a Reader reads blocks from all
// its connections at once and puts them back in order. Connections can be
// added and retired while data flows.
//
// It owns the block format, striping, reassembly and their flow control
// (a bounded send queue, a bounded reorder buffer). It leaves out setting
// the connections up (direct, reverse, splice, routed, TLS or not: package
// vconn's, the caller's), negotiating the options and choosing the number
// of streams automatically, compression and encryption: later increments
// of issue 5. The connections given to a Writer or Reader are its own from
// then on: it closes them.
//
// # Block
//
// Every block is a 16-byte header and a payload:
//
//	offset size field
//	0      1    kind     KindData, KindEnd or KindRetire
//	1      1    flags    0, except FlagAbort on an end block
//	2      2    reserved must be 0
//	4      8    offset   big-endian. Data: the offset of the payload's first
//	                     byte in the logical stream. End: the stream's total
//	                     length; 0 with FlagAbort. Retire: 0
//	12     4    length   big-endian payload length. Data: 1 to MaxBlock.
//	                     End: 0, or with FlagAbort the reason (UTF-8 text
//	                     for people), at most MaxReason. Retire: 0
//	16     ...  payload
//
// On each connection the Writer sends data blocks in increasing offset
// order; the blocks of all connections together tile [0, total) exactly
// once. The last block on a connection is an end block (the sender closed
// the stream: the same total on every connection, or an abort) or a retire
// block (this connection carries no more blocks; the others go on). A
// connection that ends otherwise (EOF, a read error) while bytes are still
// missing breaks the stream: the Reader reports it, naming the connection.
package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Kind is a block kind.
type Kind uint8

// Block kinds.
const (
	// KindData carries bytes of the stream at an offset.
	KindData Kind = 1
	// KindEnd ends the stream (on every connection): offset is the total
	// length, or with FlagAbort the sender gave up and the payload says why.
	KindEnd Kind = 2
	// KindRetire ends one connection's part: the sender sends no more
	// blocks on it; the stream goes on over the others.
	KindRetire Kind = 3
)

func (k Kind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindEnd:
		return "end"
	case KindRetire:
		return "retire"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

const (
	// HeaderSize is the size of a block header.
	HeaderSize = 16
	// MaxBlock bounds a data block's payload.
	MaxBlock = 1 << 20
	// MaxReason bounds an abort's reason.
	MaxReason = 1 << 10
	// FlagAbort, on an end block only, says the sender aborted the stream
	// rather than closing it.
	FlagAbort = 0x01
)

// ErrBlock is wrapped by every error about a malformed block or a block
// that breaks the protocol (duplicate, overlapping, beyond the end,
// disagreeing totals).
var ErrBlock = errors.New("link: bad block")

// Header is a decoded block header.
type Header struct {
	Kind   Kind
	Flags  uint8
	Offset uint64
	Length uint32
}

func (h Header) String() string {
	switch {
	case h.Kind == KindData:
		return fmt.Sprintf("data [%d, %d)", h.Offset, h.Offset+uint64(h.Length))
	case h.Kind == KindEnd && h.Flags&FlagAbort != 0:
		return "abort"
	case h.Kind == KindEnd:
		return fmt.Sprintf("end at %d", h.Offset)
	}
	return h.Kind.String()
}

// Put writes h into b[:HeaderSize]. It does not check h: ParseHeader does.
func (h Header) Put(b []byte) {
	b[0], b[1], b[2], b[3] = byte(h.Kind), h.Flags, 0, 0
	binary.BigEndian.PutUint64(b[4:], h.Offset)
	binary.BigEndian.PutUint32(b[12:], h.Length)
}

// ParseHeader decodes and checks a block header.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: header of %d bytes, want %d", ErrBlock, len(b), HeaderSize)
	}
	h := Header{Kind: Kind(b[0]), Flags: b[1], Offset: binary.BigEndian.Uint64(b[4:]), Length: binary.BigEndian.Uint32(b[12:])}
	switch {
	case h.Kind != KindData && h.Kind != KindEnd && h.Kind != KindRetire:
		return Header{}, fmt.Errorf("%w: unknown kind %d", ErrBlock, b[0])
	case b[2] != 0 || b[3] != 0 || h.Flags&^FlagAbort != 0 || (h.Flags != 0 && h.Kind != KindEnd):
		return Header{}, fmt.Errorf("%w: %s block with reserved bits set (%#x %#x %#x)", ErrBlock, h.Kind, b[1], b[2], b[3])
	case h.Kind == KindData && (h.Length == 0 || h.Length > MaxBlock):
		return Header{}, fmt.Errorf("%w: data block of %d bytes, want 1 to %d", ErrBlock, h.Length, MaxBlock)
	case h.Kind == KindData && h.Offset > math.MaxInt64-uint64(h.Length):
		return Header{}, fmt.Errorf("%w: data block at offset %d beyond any stream", ErrBlock, h.Offset)
	case h.Kind == KindEnd && h.Offset > math.MaxInt64:
		return Header{}, fmt.Errorf("%w: end block with total %d beyond any stream", ErrBlock, h.Offset)
	case h.Kind == KindEnd && h.Flags&FlagAbort == 0 && h.Length != 0:
		return Header{}, fmt.Errorf("%w: end block with %d bytes of payload", ErrBlock, h.Length)
	case h.Kind == KindEnd && h.Flags&FlagAbort != 0 && h.Offset != 0:
		return Header{}, fmt.Errorf("%w: abort block with offset %d, want 0", ErrBlock, h.Offset)
	case h.Kind == KindEnd && h.Length > MaxReason:
		return Header{}, fmt.Errorf("%w: abort reason of %d bytes, more than the %d allowed", ErrBlock, h.Length, MaxReason)
	case h.Kind == KindRetire && (h.Offset != 0 || h.Length != 0):
		return Header{}, fmt.Errorf("%w: retire block with offset %d and length %d, want 0 and 0", ErrBlock, h.Offset, h.Length)
	}
	return h, nil
}

// AppendBlock appends a block (header and payload) to b. It does not check
// the block: ParseHeader does.
func AppendBlock(b []byte, h Header, payload []byte) []byte {
	h.Length = uint32(len(payload))
	var hdr [HeaderSize]byte
	h.Put(hdr[:])
	return append(append(b, hdr[:]...), payload...)
}
