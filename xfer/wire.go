package xfer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Frames. Every message travels as one frame:
//
//	type    1 byte   (the m* constants below)
//	length  4 bytes  big-endian, the payload's length, at most maxFrame
//	payload length bytes, the message's fields in order:
//	        u8/u32/u64/i64 fixed-size big-endian; str is a u16 length and
//	        that many bytes of UTF-8 without NUL; bytes is a u32 length
//	        and that many bytes. A decoder refuses a short payload, a
//	        field out of range and bytes left over.
const (
	// Opening (the client's first frame and the server's answer).
	// A get's or push's paths are those asked for, relative to the
	// served root; a put's are its sources' base names, one element
	// each, which every entry's first element must be (names.go). n is
	// at least 1.
	mRequest = 1 // op u8, flags u8, dest str, n u16, n x path str, target str, streams u32 (0 = auto), compress str, limit u64 (bytes/s the sender may send, 0 = no bound)
	mAccept  = 2 // placement u8: where entries go at a receiving server (placeInto, placeAs; 0 otherwise)
	mRefuse  = 3 // text str

	// Delegation for a push (third-party transfer), server <-> caller,
	// right after mAccept: the source's request, then the caller's answer.
	mDelegate = 4 // blob bytes (at most maxBlob; empty: nothing asked / nothing given)

	// Either end of a session, instead of its next message: the session
	// ends, for this reason (a receiver refusing an entry that names a
	// place outside its destination, a quota); the sender of it closes
	// once the other end has closed, or after abortLinger.
	mAbort = 5 // text str

	// Sender -> receiver.
	mPlan = 10 // files u64, bytes u64: what the sender will offer (regular files; directories are not counted)
	mFile = 11 // id u32, kind u8, path str, size u64, mode u32, mtime i64 (Unix ns), block u32
	mData = 12 // id u32, offset u64, digest u64, then the block's bytes (the rest of the payload, 1..block)
	mEnd  = 13 // id u32, digest u64: the file's digest (see Digest); all wanted blocks were sent
	mFail = 14 // id u32, path str, text str, code u8 (failOther, failChanged): the sender cannot send this entry (no id was given: 0)
	mBye  = 15 // (empty) both ways: all files offered and answered; the answer closes the session

	// Receiver -> sender.
	mWant = 20 // id u32, status u8, text str, n u32, n x digest u64: the blocks the receiver has
	mAck  = 21 // id u32, ok u8, text str, kept u64, got u64: the file's final state

	// Source -> caller of a push: progress and the summary.
	mEvent  = 30 // kind u8 (EventPlan..EventDir), id u32, path str, size u64, n u64, text str
	mResult = 31 // summary: JSON of Summary, at most maxBlob

	// Caller -> source of a push, once the push runs (after mDelegate):
	// pause and resume (Hold). Both empty; anything else from the caller
	// ends the push. A source that predates them ends the push too.
	mHold = 32 // (empty) hold the next block until mGo
	mGo   = 33 // (empty) go on sending
)

// Request operations.
const (
	opGet  = 1 // the server sends paths to the client, which stores them at dest
	opPut  = 2 // the client sends, the server stores at dest
	opPush = 3 // the server sends paths to target's server, storing them at dest there
)

// Request flags.
const (
	flagRecursive = 1 << 0
	flagResume    = 1 << 1
	flagInto      = 1 << 2 // the receiver puts entries into dest (a directory); set on retries
	flagAs        = 1 << 3 // the receiver stores the one source as dest; set on retries
	flagsKnown    = flagRecursive | flagResume | flagInto | flagAs
)

// Placements: how a receiver maps entry paths (SOURCE/REST) to its files.
const (
	placeInto = 1 // DEST/SOURCE/REST: dest is an existing directory
	placeAs   = 2 // DEST/REST: one source, stored under the name dest
)

// Entry kinds of mFile.
const (
	kindFile = 0
	kindDir  = 1
)

// Failure codes of mFail.
const (
	failOther   = 0 // the text says why
	failChanged = 1 // the source file changed while it was sent: what was sent is torn
)

// Want statuses.
const (
	wantSend  = 0 // send the blocks whose digests differ from those listed
	wantSkip  = 1 // the receiver already holds this file whole (resume): send nothing, no mEnd
	wantError = 2 // the receiver cannot take the file (text says why): send nothing, no mEnd
)

const (
	maxFrame = MaxBlock + 64 // the largest payload: a data block and its fields
	maxBlob  = 1 << 20       // delegation blobs and summaries
	maxPaths = 0xffff        // paths in one request (the range of its u16 count: a put names every source; maxFrame bounds their bytes)
	// maxBlocks bounds the digests in a want: a file's size over its block
	// size (see blockSize).
	maxBlocks = 1 << 17
	// MaxBlock is the largest block a sender may use.
	MaxBlock = 8 << 20
)

var errFrame = errors.New("xfer: malformed message")

// frameWriter writes frames to a buffered writer; callers serialize.
type frameWriter struct {
	w   *bufio.Writer
	hdr [5]byte
}

func (f *frameWriter) write(typ byte, payload ...[]byte) error {
	n := 0
	for _, p := range payload {
		n += len(p)
	}
	if n > maxFrame {
		return fmt.Errorf("xfer: message %d of %d bytes is too long", typ, n)
	}
	f.hdr[0] = typ
	binary.BigEndian.PutUint32(f.hdr[1:], uint32(n))
	if _, err := f.w.Write(f.hdr[:]); err != nil {
		return err
	}
	for _, p := range payload {
		if _, err := f.w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

// readFrame reads one frame into buf (grown as needed) and returns its
// type and payload, which stays valid until the next call.
func readFrame(r io.Reader, buf *[]byte) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("%w: type %d, %d bytes (at most %d)", errFrame, hdr[0], n, maxFrame)
	}
	if cap(*buf) < int(n) {
		*buf = make([]byte, n)
	}
	p := (*buf)[:n]
	if _, err := io.ReadFull(r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return hdr[0], p, nil
}

// enc appends fields.
type enc []byte

func (e enc) u8(v uint8) enc   { return append(e, v) }
func (e enc) u16(v uint16) enc { return binary.BigEndian.AppendUint16(e, v) }
func (e enc) u32(v uint32) enc { return binary.BigEndian.AppendUint32(e, v) }
func (e enc) u64(v uint64) enc { return binary.BigEndian.AppendUint64(e, v) }
func (e enc) i64(v int64) enc  { return e.u64(uint64(v)) }
func (e enc) str(s string) enc {
	if len(s) > 0xffff {
		s = s[:0xffff]
	}
	return append(e.u16(uint16(len(s))), s...)
}
func (e enc) bytes(b []byte) enc { return append(e.u32(uint32(len(b))), b...) }

// dec reads fields; the first error sticks.
type dec struct {
	p   []byte
	err error
}

func (d *dec) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.p) < n {
		d.err = fmt.Errorf("%w: short", errFrame)
		return nil
	}
	b := d.p[:n]
	d.p = d.p[n:]
	return b
}

func (d *dec) u8() uint8 {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *dec) u16() uint16 {
	if b := d.take(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (d *dec) u32() uint32 {
	if b := d.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (d *dec) u64() uint64 {
	if b := d.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (d *dec) i64() int64 { return int64(d.u64()) }

func (d *dec) str() string {
	b := d.take(int(d.u16()))
	if d.err == nil && (!utf8.Valid(b) || containsNUL(b)) {
		d.err = fmt.Errorf("%w: a text field is not UTF-8 or holds NUL", errFrame)
	}
	return string(b)
}

func (d *dec) bytes(limit int) []byte {
	n := d.u32()
	if d.err == nil && n > uint32(limit) {
		d.err = fmt.Errorf("%w: %d bytes (at most %d)", errFrame, n, limit)
		return nil
	}
	return d.take(int(n))
}

// fail records a field out of range.
func (d *dec) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{errFrame}, args...)...)
	}
}

// done reports the first error, or bytes left over.
func (d *dec) done() error {
	if d.err == nil && len(d.p) != 0 {
		d.err = fmt.Errorf("%w: %d bytes left over", errFrame, len(d.p))
	}
	return d.err
}

func containsNUL(b []byte) bool {
	for _, c := range b {
		if c == 0 {
			return true
		}
	}
	return false
}
