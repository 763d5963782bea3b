// Package link stripes one ordered byte stream over several connections,
// as GridFTP's MODE E and NetIbis's parallel streams do: a Writer cuts the
// stream into blocks that carry their offset in the stream and sends each
// on whichever connection can take it, and a Reader reads blocks from all
// its connections at once and puts them back in order. Connections can be
// added and retired while data flows. Blocks may be compressed (S2 or
// zstd, from github.com/klauspost/compress), each on its own, and with
// CompressAuto the Writer decides per block whether and how.
//
// On top of that, Dial and Listen make links: one two-way byte stream
// between two nodes over one or several virtual connections (package
// vconn) set up like the first, whatever the method, with options agreed
// in a hello on the first connection (hello.go): the number of streams (a
// number, or Auto: tune.go grows it while throughput grows), compression
// for both directions, and encryption (TLS 1.3 as vconn sets it up, or
// authenticated plain: the handshake proves both ends, then the bytes
// travel in the clear). A link of one stream without compression is the
// virtual connection itself, with a hello in front and no wait.
//
// A link may be resumable (Options.Resume, agreed in the hello; off by
// default and with peers that predate it): it survives the loss of the
// connections beneath it. The receiving end acknowledges the offset up to
// which it delivered the stream, the sending end keeps what is not
// acknowledged (at most a window agreed in the hello) and sends it again
// on the connections left or set up again; a connection joins a running
// link by naming it and presenting its secret resume token, and only
// from the link's proved peer. The application sees a pause; if no
// connection comes back within ResumeTimeout (30s), a *LostError naming
// the last connection, how it died and when (resume.go).
//
// It owns the block format, striping, reassembly, compression and their
// flow control (a bounded send queue, a bounded reorder buffer), the link
// hello and the stream tuner; resumable links' acks, resend buffer, window,
// resume handshake and timeout. It leaves out setting the connections up
// and their handshakes (package vconn's: a resumable link is given a
// redial function, Options.Redial, and its accepting end gets joiners
// through its Listener), choosing or switching paths (the caller's, by
// what its redial function dials), noticing a connection that stalls
// without failing (a keepalive's), and measuring links (package perf's).
// The connections given to a Writer or Reader are its own from then on: it
// closes them.
//
// # Block
//
// Every block is a 16-byte header and a payload:
//
//	offset size field
//	0      1    kind     KindData, KindEnd, KindRetire or KindAck
//	1      1    flags    Data: 0, FlagS2 or FlagZstd (never both). End: 0
//	                     or FlagAbort. Retire: 0. Ack: 0 or FlagFinal
//	2      2    reserved must be 0
//	4      8    offset   big-endian. Data: the offset of the payload's first
//	                     (decoded) byte in the logical stream. End: the
//	                     stream's total length; 0 with FlagAbort. Retire: 0.
//	                     Ack: the bytes of the other direction's stream the
//	                     sender has delivered in order (at most 2^63-1)
//	12     4    length   big-endian payload length, as on the wire. Data: 1
//	                     to MaxBlock; at least 5 if compressed. End: 0, or
//	                     with FlagAbort the reason (UTF-8 text for people),
//	                     at most MaxReason. Retire, Ack: 0
//	16     ...  payload
//
// A compressed data block's payload is its decoded length, then the
// codec's bytes:
//
//	offset size field
//	0      4    decoded  big-endian: the bytes of the stream the block
//	                     carries, 1 to MaxBlock, more than the payload's
//	                     length (a block that does not shrink goes as it is)
//	4      ...  codec    FlagS2: one S2 block (github.com/klauspost/compress/s2
//	                     block format, not the stream format). FlagZstd:
//	                     zstd frames (RFC 8878) with windows of at most
//	                     MaxBlock (the Writer sends one frame, with its
//	                     content size and checksum)
//
// Decoded, it must be exactly the declared length; it tiles the stream as
// an uncompressed block of that length would.
//
// On each connection the Writer sends data blocks in increasing offset
// order; the blocks of all connections together tile [0, total) exactly
// once. The last block on a connection is an end block (the sender closed
// the stream: the same total on every connection, or an abort) or a retire
// block (this connection carries no more blocks; the others go on). A
// connection that ends otherwise (EOF, a read error) while bytes are still
// missing breaks the stream: the Reader reports it, naming the connection.
//
// # Resumable links
//
// On a resumable link (agreed in the hello, resume.go) every connection
// carries blocks both ways, and a connection's death is not the stream's:
// the receiving end acknowledges, with ack blocks sent among its own
// blocks on any connection of the link, the offset up to which it has
// delivered the other direction's stream to the application; the sending
// end keeps every block until an ack covers it (at most the window agreed
// in the hello, counted as for the reorder buffer) and sends the blocks a
// dead connection carried again on the others, or on connections that
// join later. So on a resumable link:
//
//   - a connection's data blocks need not increase in offset (a resent
//     block may follow later ones), and a data block may repeat one
//     received before (the same offset and length: the Reader drops it);
//   - the Reader never holds more than the window: a block beyond it
//     breaks the protocol;
//   - an end block is not a connection's last: acks, resent data blocks
//     and further end blocks (the same total) may follow; a connection
//     ends when it is closed, retired, or dies;
//   - acks come in any order across connections: a lower one than
//     already known is stale and ignored; one beyond the bytes written
//     breaks the protocol. A side closing the link, once it received the
//     whole stream and the peer acknowledged its own in full, sends the
//     final ack (FlagFinal, of the total) on every connection, and on
//     every connection that joins later: after its end block and its
//     final ack, a side sends nothing more on a connection, and the other
//     side, having read both, may close it without leaving bytes unread.
//     A final ack also says its sender needs nothing more: a side stops
//     (and refuses joins) only once it has had one, else it waits for the
//     link to come back so the peer hears that its stream arrived (releases
//     before 2026-12 sent it as soon as their application read the
//     stream to the end, and stopped without one: with such a peer a
//     side only closes sooner).
//
// Ack blocks on a link that is not resumable break the protocol.
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
	// KindAck, on resumable links only, acknowledges the other
	// direction's stream up to offset: delivered in order.
	KindAck Kind = 4
)

func (k Kind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindEnd:
		return "end"
	case KindRetire:
		return "retire"
	case KindAck:
		return "ack"
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
	// FlagS2, on a data block only, says its payload is compressed with S2.
	FlagS2 = 0x02
	// FlagZstd, on a data block only, says its payload is compressed with
	// zstd.
	FlagZstd = 0x04
	// FlagFinal, on an ack block only, says the sender delivered the
	// whole stream, end included, had its own acknowledged in full, and
	// sends nothing more on this connection but its own end block, if it
	// has not yet.
	FlagFinal = 0x08
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
	case h.Kind == KindData && codecOf(h.Flags) != codecNone:
		return fmt.Sprintf("%s data at %d (%d bytes on the wire)", codecOf(h.Flags), h.Offset, h.Length)
	case h.Kind == KindData:
		return fmt.Sprintf("data [%d, %d)", h.Offset, h.Offset+uint64(h.Length))
	case h.Kind == KindEnd && h.Flags&FlagAbort != 0:
		return "abort"
	case h.Kind == KindEnd:
		return fmt.Sprintf("end at %d", h.Offset)
	case h.Kind == KindAck && h.Flags&FlagFinal != 0:
		return fmt.Sprintf("final ack of %d", h.Offset)
	case h.Kind == KindAck:
		return fmt.Sprintf("ack of %d", h.Offset)
	}
	return h.Kind.String()
}

// Put writes h into b[:HeaderSize]. It does not check h: ParseHeader does.
func (h Header) Put(b []byte) {
	b[0], b[1], b[2], b[3] = byte(h.Kind), h.Flags, 0, 0
	binary.BigEndian.PutUint64(b[4:], h.Offset)
	binary.BigEndian.PutUint32(b[12:], h.Length)
}

// allowedFlags are the flags each kind may carry.
var allowedFlags = [...]uint8{KindData: FlagS2 | FlagZstd, KindEnd: FlagAbort, KindRetire: 0, KindAck: FlagFinal}

// ParseHeader decodes and checks a block header. For a compressed data
// block it checks the header only: the Reader checks the decoded length
// and the codec's bytes.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: header of %d bytes, want %d", ErrBlock, len(b), HeaderSize)
	}
	h := Header{Kind: Kind(b[0]), Flags: b[1], Offset: binary.BigEndian.Uint64(b[4:]), Length: binary.BigEndian.Uint32(b[12:])}
	switch {
	case h.Kind != KindData && h.Kind != KindEnd && h.Kind != KindRetire && h.Kind != KindAck:
		return Header{}, fmt.Errorf("%w: unknown kind %d", ErrBlock, b[0])
	case b[2] != 0 || b[3] != 0 || h.Flags&^allowedFlags[h.Kind] != 0:
		return Header{}, fmt.Errorf("%w: %s block with unknown or reserved bits set (%#x %#x %#x)", ErrBlock, h.Kind, b[1], b[2], b[3])
	case h.Kind == KindData && h.Flags == FlagS2|FlagZstd:
		return Header{}, fmt.Errorf("%w: data block with both codec flags set (%#x)", ErrBlock, h.Flags)
	case h.Kind == KindData && (h.Length == 0 || h.Length > MaxBlock):
		return Header{}, fmt.Errorf("%w: data block of %d bytes, want 1 to %d", ErrBlock, h.Length, MaxBlock)
	case h.Kind == KindData && h.Flags != 0 && h.Length <= lenPrefix:
		return Header{}, fmt.Errorf("%w: %s data block of %d bytes, want at least %d", ErrBlock, codecOf(h.Flags), h.Length, lenPrefix+1)
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
	case h.Kind == KindAck && h.Length != 0:
		return Header{}, fmt.Errorf("%w: ack block with %d bytes of payload", ErrBlock, h.Length)
	case h.Kind == KindAck && h.Offset > math.MaxInt64:
		return Header{}, fmt.Errorf("%w: ack of %d, beyond any stream", ErrBlock, h.Offset)
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
