// Package wire is gridlink's framing on hub links (node to hub and hub to
// hub): the binary frame header, the frame types, and the control messages
// they carry. It owns encoding and strict decoding of these bytes; what the
// messages mean is the hubs' and virtual connections' business.
//
// # Frame
//
// Every frame is a 12-byte header and a payload:
//
//	offset size field
//	0      1    type     one of the Type constants
//	1      1    flags    0, except FlagHub on a reset frame
//	2      2    reserved must be 0
//	4      4    circuit  big-endian; the circuit (relayed connection) on this
//	                     link, 0 for frames about the link itself
//	8      4    length   big-endian payload length, at most MaxPayload
//	12     ...  payload
//
// Circuits are numbered per link and per direction of setup: the side that
// opens a circuit on a link picks its number (odd from the side that dialled
// the link, even from the side that accepted it), as in HTTP/2.
//
// # Circuits and flow control
//
// A circuit is opened by TOpen and answered by TAccept or TReset. Flow
// control is end to end: each end grants the other a window of bytes it may
// send. The opener grants Open.Window; the acceptor grants Accept.Window,
// counted from the circuit's first byte. Until the accept arrives the opener
// may send InitialWindow bytes (its first bytes, e.g. a TLS ClientHello,
// follow the open frame). TWindow frames grant more as the receiver's
// application reads. No window ever exceeds MaxWindow; hubs on the way
// count every circuit's bytes against its window and reset circuits that
// overrun it.
//
// TPing and TPong on circuit 0 measure the link; on a circuit they travel
// end to end (hubs switch them like data) and measure the circuit.
package wire

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Type is a frame type.
type Type uint8

// Frame types.
const (
	// TControl carries one control message (JSON, see Message) about the
	// link or the overlay. Circuit is 0.
	TControl Type = 1
	// TOpen opens a circuit: the payload is an Open message (JSON).
	TOpen Type = 2
	// TAccept answers TOpen: the target accepted. Payload: Accept (JSON).
	TAccept Type = 3
	// TData carries connection bytes on a circuit.
	TData Type = 4
	// TWindow grants the sender more bytes on a circuit: payload is a
	// 4-byte big-endian increment.
	TWindow Type = 5
	// TFin says the sender will send no more data on the circuit (TCP
	// half-close). Empty payload.
	TFin Type = 6
	// TReset aborts a circuit, or refuses a TOpen; payload: the reason,
	// UTF-8 text for people (e.g. "connection refused").
	TReset Type = 7
	// TPing and TPong measure a link's round trip: payload 8 opaque bytes
	// that the pong echoes.
	TPing Type = 8
	TPong Type = 9
	// TSealed (10) carries another frame, encrypted: see seal.go.
)

var typeNames = [...]string{"", "control", "open", "accept", "data", "window", "fin", "reset", "ping", "pong", "sealed"}

func (t Type) String() string {
	if int(t) < len(typeNames) && t != 0 {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

const (
	// HeaderSize is the size of a frame header.
	HeaderSize = 12
	// MaxPayload bounds a frame's payload; larger frames are a protocol
	// error.
	MaxPayload = 1 << 20
	// MaxControl bounds control, open and accept payloads.
	MaxControl = 64 << 10

	// InitialWindow is what the opener of a circuit may send before the
	// accept arrives, and the smallest window an acceptor may grant.
	InitialWindow = 256 << 10
	// MaxWindow bounds every window and every window increment.
	MaxWindow = 16 << 20

	// FlagHub, on a reset frame only, says that a hub generated the reset
	// (no route, target not attached, a hub link lost) rather than the far
	// end of the circuit.
	FlagHub = 0x01
)

// Frame is one decoded frame. Payload aliases the reader's buffer until
// the next read.
type Frame struct {
	Type    Type
	Flags   uint8
	Circuit uint32
	Payload []byte

	from *Reader // the Reader whose pooled buffer may hold Payload (Keep)
}

func (f Frame) String() string {
	return fmt.Sprintf("%s circuit %d (%d bytes)", f.Type, f.Circuit, len(f.Payload))
}

// ErrFrame is wrapped by every decoding error.
var ErrFrame = errors.New("wire: bad frame")

// PutHeader writes a frame header without flags into b[:HeaderSize].
func PutHeader(b []byte, t Type, circuit uint32, length int) {
	PutHeaderFlags(b, t, 0, circuit, length)
}

// PutHeaderFlags writes a frame header into b[:HeaderSize].
func PutHeaderFlags(b []byte, t Type, flags uint8, circuit uint32, length int) {
	b[0] = byte(t)
	b[1], b[2], b[3] = flags, 0, 0
	binary.BigEndian.PutUint32(b[4:], circuit)
	binary.BigEndian.PutUint32(b[8:], uint32(length))
}

// ParseHeader checks a frame header and returns its fields.
func ParseHeader(b []byte) (t Type, circuit uint32, length int, err error) {
	if len(b) < HeaderSize {
		return 0, 0, 0, fmt.Errorf("%w: header of %d bytes, want %d", ErrFrame, len(b), HeaderSize)
	}
	t = Type(b[0])
	circuit = binary.BigEndian.Uint32(b[4:])
	n := binary.BigEndian.Uint32(b[8:])
	switch {
	case t == 0 || int(t) >= len(typeNames):
		return 0, 0, 0, fmt.Errorf("%w: unknown type %d", ErrFrame, b[0])
	case (b[1] != 0 && !(t == TReset && b[1] == FlagHub)) || b[2] != 0 || b[3] != 0:
		return 0, 0, 0, fmt.Errorf("%w: %s frame with reserved bits set (%#x %#x %#x)", ErrFrame, t, b[1], b[2], b[3])
	case n > MaxPayload:
		return 0, 0, 0, fmt.Errorf("%w: %s frame of %d bytes, more than the %d allowed", ErrFrame, t, n, MaxPayload)
	case (t == TControl || t == TOpen || t == TAccept || t == TReset) && n > MaxControl:
		return 0, 0, 0, fmt.Errorf("%w: %s frame of %d bytes, more than the %d allowed", ErrFrame, t, n, MaxControl)
	case t == TSealed && (n > maxSealed || n < SealOverhead):
		return 0, 0, 0, fmt.Errorf("%w: sealed frame of %d bytes, want %d to %d", ErrFrame, n, SealOverhead, maxSealed)
	case (t == TControl || t == TSealed) && circuit != 0:
		return 0, 0, 0, fmt.Errorf("%w: %s frame on circuit %d, want 0", ErrFrame, t, circuit)
	case t != TControl && t != TSealed && t != TPing && t != TPong && circuit == 0:
		return 0, 0, 0, fmt.Errorf("%w: %s frame without a circuit", ErrFrame, t)
	case t == TWindow && n != 4, (t == TPing || t == TPong) && n != 8:
		return 0, 0, 0, fmt.Errorf("%w: %s frame of %d bytes", ErrFrame, t, n)
	case t == TFin && n != 0:
		return 0, 0, 0, fmt.Errorf("%w: fin frame with %d bytes of payload", ErrFrame, n)
	}
	return t, circuit, int(n), nil
}

// Reader decodes frames from a stream. A payload of up to smallPayload
// bytes is read into the Reader itself, a larger one into a pooled buffer
// (bodypool.go) that goes back to its pool at the next Read: a reader
// waiting for its next frame holds no payload buffer.
type Reader struct {
	r     io.Reader
	hdr   [HeaderSize]byte
	small [smallPayload]byte
	body  *[]byte // borrowed for the last frame's payload

	aead   cipher.AEAD // set by Unseal
	opened uint64      // sealed frames opened
	n      [12]byte
}

// NewReader returns a Reader on r (which should be buffered).
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// Read reads the next frame. Its payload is valid until the next Read.
// Errors other than io.EOF at a frame boundary wrap ErrFrame or the
// stream's error.
func (r *Reader) Read() (Frame, error) {
	if r.body != nil {
		putBody(r.body)
		r.body = nil
	}
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("%w: stream ended inside a header", ErrFrame)
		}
		return Frame{}, err
	}
	t, circuit, n, err := ParseHeader(r.hdr[:])
	if err != nil {
		return Frame{}, err
	}
	var p []byte
	if n <= smallPayload {
		p = r.small[:n]
	} else {
		r.body = getBody(n)
		p = (*r.body)[:n]
	}
	if _, err := io.ReadFull(r.r, p); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("%w: stream ended inside a %s frame", ErrFrame, t)
		}
		return Frame{}, err
	}
	switch {
	case r.aead == nil && t == TSealed:
		return Frame{}, fmt.Errorf("%w: sealed frame before the link's keys", ErrFrame)
	case r.aead == nil, t == TData:
	case t == TSealed:
		return r.open(p)
	default:
		return Frame{}, fmt.Errorf("%w: %s frame not sealed, on a sealed link", ErrFrame, t)
	}
	return Frame{Type: t, Flags: r.hdr[1], Circuit: circuit, Payload: p, from: r}, nil
}

// Append appends an encoded frame without flags to b.
func Append(b []byte, t Type, circuit uint32, payload []byte) []byte {
	return AppendFlags(b, t, 0, circuit, payload)
}

// AppendFlags appends an encoded frame to b.
func AppendFlags(b []byte, t Type, flags uint8, circuit uint32, payload []byte) []byte {
	var h [HeaderSize]byte
	PutHeaderFlags(h[:], t, flags, circuit, len(payload))
	return append(append(b, h[:]...), payload...)
}

// WindowPayload encodes a TWindow increment.
func WindowPayload(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

// WindowIncrement decodes a TWindow payload without checking it.
func WindowIncrement(p []byte) uint32 { return binary.BigEndian.Uint32(p) }

// DecodeWindow decodes and checks a TWindow payload: an increment of 1 to
// MaxWindow bytes.
func DecodeWindow(p []byte) (uint32, error) {
	if len(p) != 4 {
		return 0, fmt.Errorf("%w: window payload of %d bytes", ErrFrame, len(p))
	}
	n := binary.BigEndian.Uint32(p)
	if n == 0 || n > MaxWindow {
		return 0, fmt.Errorf("%w: window increment %d, want 1 to %d", ErrFrame, n, MaxWindow)
	}
	return n, nil
}
