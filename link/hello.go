package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// A link connection (Dial, Listen) begins, on each of its virtual
// connections and over the TLS session that proved the peer, with a hello
// from the dialler and, unless the hello says otherwise, a reply from the
// acceptor.
//
// Hello, 24 bytes:
//
//	offset size field
//	0      4    magic    "GLK1"
//	4      1    kind     helloOpen (a new link) or helloJoin (another
//	                     connection of a link)
//	5      1    flags    flagPlain: leave TLS after the reply (open: asked;
//	                     join: the link's mode); flagBlocks: the link
//	                     carries blocks, not the bare byte stream;
//	                     flagNoReply (open only): the dialler does not
//	                     wait for a reply and sends data at once
//	6      1    compress the dialler's compression for both directions
//	                     (compressOff, compressS2, compressZstd, compressAuto)
//	7      1    reserved must be 0
//	8      16   link     the link's ID, chosen at random by the dialler
//
// With flagResume (a resumable link, resume.go: only with flagBlocks) the
// hello goes on with 40 bytes:
//
//	offset size field
//	24     32   token    the link's resume token: open: chosen at random by
//	                     the dialler; join: the link's. Never all zeros
//	56     4    window   big-endian. Open: the dialler's ResendBuffer,
//	                     minWindow to MaxWindow. Join: 0
//	60     4    timeout  big-endian milliseconds. Open: the dialler's
//	                     ResumeTimeout, 1 to MaxResumeTimeout. Join: 0
//
// The token is a secret of the two ends: it travels only here, inside the
// TLS session (a plain link leaves TLS after the reply). A join of a
// resumable link must present it, over a connection whose proved peer is
// the link's.
//
// Reply, 8 bytes and a reason:
//
//	offset size field
//	0      4    magic    "GLK1"
//	4      1    status   replyOK or replyRefused
//	5      1    flags    flagPlain if the link leaves TLS (echoes the hello);
//	                     flagResume if the acceptor knows resumable links
//	                     and the hello asked for one (OK: the link is
//	                     resumable; refused: refused for the reason, which
//	                     a dialler must not take for an old acceptor)
//	6      2    length   big-endian length of the reason, at most maxReason:
//	                     UTF-8 text for people, why the link was refused
//	8      ...  reason
//
// An OK reply with flagResume goes on with the window the link uses both
// ways, 4 bytes big-endian: at most the hello's, at least minWindow; then
// the resume timeout both ends use, 4 bytes big-endian milliseconds: at
// most the hello's, at least 1 (each end proposes its ResumeTimeout, the
// link uses the smaller).
//
// An acceptor that predates resumable links refuses a hello with
// flagResume (unknown flags) without flagResume in its reply: the dialler
// then opens the link again without it, over a new connection.
// After an OK reply both ends switch to the clear if flagPlain is set (the
// reply is the last TLS record either way), then carry either the
// application's bytes as they are (one stream, no compression: the link
// costs nothing) or blocks (see the package doc) on every connection.
const (
	helloMagic = "GLK1"
	helloSize  = 24
	replySize  = 8
	maxReason  = 512

	helloOpen = 1
	helloJoin = 2

	flagPlain   = 1 << 0
	flagBlocks  = 1 << 1
	flagNoReply = 1 << 2
	flagResume  = 1 << 3
	knownFlags  = flagPlain | flagBlocks | flagNoReply | flagResume

	resumeExtSize = 40
	tokenSize     = 32

	replyOK      = 0
	replyRefused = 1
)

// compression on the wire, in a hello's compress byte.
var compressWire = []Compression{CompressOff, CompressS2, CompressZstd, CompressAuto}

// LinkID names a link: the same on all its connections.
type LinkID [16]byte

func (id LinkID) String() string { return fmt.Sprintf("%x", id[:4]) }

type hello struct {
	kind     byte
	flags    byte
	compress Compression
	link     LinkID
	token    [tokenSize]byte // with flagResume
	window   uint32          // with flagResume
	timeout  uint32          // with flagResume: milliseconds
}

func (h hello) append(b []byte) []byte {
	var c byte
	for i, m := range compressWire {
		if m == h.compress {
			c = byte(i)
		}
	}
	b = append(b, helloMagic...)
	b = append(b, h.kind, h.flags, c, 0)
	b = append(b, h.link[:]...)
	if h.flags&flagResume != 0 {
		b = append(b, h.token[:]...)
		b = binary.BigEndian.AppendUint32(b, h.window)
		b = binary.BigEndian.AppendUint32(b, h.timeout)
	}
	return b
}

// ErrHello is wrapped by the errors of a malformed hello or reply.
var ErrHello = errors.New("link: bad hello")

func parseHello(b []byte) (hello, error) {
	want := helloSize
	if len(b) > 5 && b[5]&flagResume != 0 {
		want += resumeExtSize
	}
	if len(b) != want {
		return hello{}, fmt.Errorf("%w: %d bytes, want %d", ErrHello, len(b), want)
	}
	if string(b[:4]) != helloMagic {
		return hello{}, fmt.Errorf("%w: magic %q, want %q (not a gridlink link, or another version)", ErrHello, b[:4], helloMagic)
	}
	h := hello{kind: b[4], flags: b[5]}
	switch {
	case h.kind != helloOpen && h.kind != helloJoin:
		return hello{}, fmt.Errorf("%w: unknown kind %d", ErrHello, h.kind)
	case h.flags&^knownFlags != 0:
		return hello{}, fmt.Errorf("%w: unknown flags %#x", ErrHello, h.flags&^knownFlags)
	case h.kind == helloJoin && h.flags&flagNoReply != 0:
		return hello{}, fmt.Errorf("%w: a join without a reply", ErrHello)
	case h.flags&flagNoReply != 0 && h.flags&(flagPlain|flagBlocks) != 0:
		return hello{}, fmt.Errorf("%w: flags %#x: a link that leaves TLS or carries blocks waits for the reply", ErrHello, h.flags)
	case int(b[6]) >= len(compressWire):
		return hello{}, fmt.Errorf("%w: unknown compression %d", ErrHello, b[6])
	case b[7] != 0:
		return hello{}, fmt.Errorf("%w: reserved byte %d", ErrHello, b[7])
	case h.flags&flagResume != 0 && h.flags&flagBlocks == 0:
		return hello{}, fmt.Errorf("%w: a resumable link without blocks", ErrHello)
	}
	h.compress = compressWire[b[6]]
	copy(h.link[:], b[8:])
	if h.flags&flagResume == 0 {
		return h, nil
	}
	copy(h.token[:], b[helloSize:])
	h.window = binary.BigEndian.Uint32(b[helloSize+tokenSize:])
	h.timeout = binary.BigEndian.Uint32(b[helloSize+tokenSize+4:])
	switch {
	case h.token == [tokenSize]byte{}:
		return hello{}, fmt.Errorf("%w: a resume token of zeros", ErrHello)
	case h.kind == helloOpen && (h.window < minWindow || h.window > MaxWindow):
		return hello{}, fmt.Errorf("%w: window of %d bytes, want %d to %d", ErrHello, h.window, minWindow, MaxWindow)
	case h.kind == helloJoin && h.window != 0:
		return hello{}, fmt.Errorf("%w: a join with a window (%d)", ErrHello, h.window)
	case h.kind == helloOpen && (h.timeout < 1 || h.timeout > maxTimeoutMs):
		return hello{}, fmt.Errorf("%w: resume timeout of %d ms, want 1 to %d", ErrHello, h.timeout, maxTimeoutMs)
	case h.kind == helloJoin && h.timeout != 0:
		return hello{}, fmt.Errorf("%w: a join with a resume timeout (%d ms)", ErrHello, h.timeout)
	}
	return h, nil
}

// readHello reads a hello; legacy, as an acceptor did before resumable
// links (flagResume unknown, the rest left unread).
func readHello(r io.Reader, legacy bool) (hello, error) {
	b := make([]byte, helloSize, helloSize+resumeExtSize)
	if _, err := io.ReadFull(r, b); err != nil {
		return hello{}, fmt.Errorf("link: reading hello: %w", err)
	}
	if legacy && b[5]&flagResume != 0 {
		return hello{}, fmt.Errorf("%w: unknown flags %#x", ErrHello, b[5]&flagResume)
	}
	if b[5]&flagResume != 0 && string(b[:4]) == helloMagic {
		b = b[:helloSize+resumeExtSize]
		if _, err := io.ReadFull(r, b[helloSize:]); err != nil {
			return hello{}, fmt.Errorf("link: reading hello: %w", err)
		}
	}
	return parseHello(b)
}

type reply struct {
	status  byte
	flags   byte
	reason  string
	window  uint32 // OK with flagResume
	timeout uint32 // OK with flagResume: milliseconds
}

func (r reply) append(b []byte) []byte {
	reason := r.reason
	if len(reason) > maxReason {
		reason = reason[:maxReason]
		for !utf8.ValidString(reason) {
			reason = reason[:len(reason)-1]
		}
	}
	b = append(b, helloMagic...)
	b = append(b, r.status, r.flags)
	b = binary.BigEndian.AppendUint16(b, uint16(len(reason)))
	b = append(b, reason...)
	if r.status == replyOK && r.flags&flagResume != 0 {
		b = binary.BigEndian.AppendUint32(b, r.window)
		b = binary.BigEndian.AppendUint32(b, r.timeout)
	}
	return b
}

// parseReplyHeader checks a reply's fixed part and returns the reason's
// length.
func parseReplyHeader(b []byte) (reply, int, error) {
	if len(b) != replySize {
		return reply{}, 0, fmt.Errorf("%w: reply of %d bytes, want %d", ErrHello, len(b), replySize)
	}
	if string(b[:4]) != helloMagic {
		return reply{}, 0, fmt.Errorf("%w: reply magic %q, want %q (the acceptor does not speak links: is it a link listener?)", ErrHello, b[:4], helloMagic)
	}
	r := reply{status: b[4], flags: b[5]}
	n := int(binary.BigEndian.Uint16(b[6:]))
	switch {
	case r.status != replyOK && r.status != replyRefused:
		return reply{}, 0, fmt.Errorf("%w: unknown reply status %d", ErrHello, r.status)
	case r.flags&^(flagPlain|flagResume) != 0:
		return reply{}, 0, fmt.Errorf("%w: reply flags %#x", ErrHello, r.flags)
	case n > maxReason:
		return reply{}, 0, fmt.Errorf("%w: reason of %d bytes, at most %d", ErrHello, n, maxReason)
	case r.status == replyOK && n != 0:
		return reply{}, 0, fmt.Errorf("%w: an OK reply with a reason", ErrHello)
	}
	return r, n, nil
}

func readReply(rd io.Reader) (reply, error) {
	var b [replySize]byte
	if _, err := io.ReadFull(rd, b[:]); err != nil {
		return reply{}, fmt.Errorf("link: reading the acceptor's reply: %w", err)
	}
	r, n, err := parseReplyHeader(b[:])
	if err != nil {
		return reply{}, err
	}
	if n > 0 {
		reason := make([]byte, n)
		if _, err := io.ReadFull(rd, reason); err != nil {
			return reply{}, fmt.Errorf("link: reading the acceptor's reason: %w", err)
		}
		if !utf8.Valid(reason) {
			return reply{}, fmt.Errorf("%w: reason is not UTF-8", ErrHello)
		}
		r.reason = string(reason)
	}
	if r.status == replyOK && r.flags&flagResume != 0 {
		var w [8]byte
		if _, err := io.ReadFull(rd, w[:]); err != nil {
			return reply{}, fmt.Errorf("link: reading the acceptor's window: %w", err)
		}
		r.window = binary.BigEndian.Uint32(w[:])
		r.timeout = binary.BigEndian.Uint32(w[4:])
		if r.window < minWindow || r.window > MaxWindow {
			return reply{}, fmt.Errorf("%w: window of %d bytes, want %d to %d", ErrHello, r.window, minWindow, MaxWindow)
		}
		if r.timeout < 1 || r.timeout > maxTimeoutMs {
			return reply{}, fmt.Errorf("%w: resume timeout of %d ms, want 1 to %d", ErrHello, r.timeout, maxTimeoutMs)
		}
	}
	return r, nil
}
