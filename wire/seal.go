package wire

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"slices"
)

// # Sealed frames
//
// A link starts with a TLS 1.3 handshake that proves both ends' keys, then
// stops speaking TLS: its ends derive one key per direction from the
// handshake (pki.ChannelKeys) and seal every frame except data frames. A
// sealed frame is an ordinary frame, header and payload, encrypted and
// authenticated with AES-256-GCM and carried as the payload of a TSealed
// frame:
//
//	outer header  type TSealed, flags 0, circuit 0, length 12+n+16
//	payload       AES-GCM(inner header ‖ inner payload of n bytes) ‖ tag (16)
//
// The nonce is the number of frames the sender sealed before on this link
// (96 bits, big-endian, from 0), so a sealed frame cannot be replayed,
// dropped or reordered without the next one failing to open. Data frames
// are never sealed and travel as they are: what they carry is protected end
// to end by the circuit's own handshake (or, in authenticated-plain mode,
// meant to be readable). Tampering with a data frame can therefore spoil
// that circuit, which its ends detect, or the framing, which ends the
// link; it cannot forge a control message, an open, a window or a reset.
// This is what lets a hub relay data without decrypting and re-encrypting
// it on every hop.

// TSealed carries one sealed frame (see above). Circuit is 0.
const TSealed Type = 10

// SealOverhead is what sealing adds to a frame: an outer header and the
// authentication tag.
const SealOverhead = HeaderSize + 16

// maxSealed bounds a TSealed payload: a sealed frame is never a data frame,
// so its payload is at most MaxControl.
const maxSealed = HeaderSize + MaxControl + 16

// KeySize is the size of a sealing key.
const KeySize = 32

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("wire: sealing key of %d bytes, want %d", len(key), KeySize)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

func nonce(n *[12]byte, count uint64) []byte {
	binary.BigEndian.PutUint64(n[4:], count)
	return n[:]
}

// Sealer encodes the frames one end of a link sends after the handshake.
// It is not safe for concurrent use: frames must be encoded in the order
// they go on the wire.
type Sealer struct {
	aead  cipher.AEAD
	count uint64
	n     [12]byte
}

// NewSealer returns a Sealer for the sending direction's key.
func NewSealer(key []byte) (*Sealer, error) {
	a, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: a}, nil
}

// Append appends the frame to dst as it goes on the wire: a data frame as
// it is, any other frame sealed.
func (s *Sealer) Append(dst []byte, t Type, flags uint8, circuit uint32, payload []byte) []byte {
	if t == TData {
		return AppendFlags(dst, t, flags, circuit, payload)
	}
	n := HeaderSize + len(payload)
	dst = slices.Grow(dst, SealOverhead+n)
	start := len(dst)
	dst = dst[:start+HeaderSize+HeaderSize]
	PutHeader(dst[start:], TSealed, 0, n+s.aead.Overhead())
	PutHeaderFlags(dst[start+HeaderSize:], t, flags, circuit, len(payload))
	dst = append(dst, payload...)
	plain := dst[start+HeaderSize:]
	sealed := s.aead.Seal(plain[:0], nonce(&s.n, s.count), plain, nil)
	s.count++
	return dst[:start+HeaderSize+len(sealed)]
}

// Unseal switches r to a link's sealed phase, with the receiving
// direction's key: from the next frame on, every frame must be a data frame
// or a sealed one, and sealed frames are opened and returned as the frame
// they carry.
func (r *Reader) Unseal(key []byte) error {
	a, err := newAEAD(key)
	if err != nil {
		return err
	}
	r.aead = a
	return nil
}

// open opens a sealed payload in place and returns the frame it carries.
func (r *Reader) open(p []byte) (Frame, error) {
	plain, err := r.aead.Open(p[:0], nonce(&r.n, r.opened), p, nil)
	if err != nil {
		return Frame{}, fmt.Errorf("%w: sealed frame %d failed authentication (tampered with, replayed or out of order)", ErrFrame, r.opened)
	}
	r.opened++
	t, circuit, n, err := ParseHeader(plain)
	switch {
	case err != nil:
		return Frame{}, fmt.Errorf("sealed frame: %w", err)
	case t == TSealed || t == TData:
		return Frame{}, fmt.Errorf("%w: a sealed frame carries a %s frame", ErrFrame, t)
	case n != len(plain)-HeaderSize:
		return Frame{}, fmt.Errorf("%w: sealed %s frame says %d bytes, carries %d", ErrFrame, t, n, len(plain)-HeaderSize)
	}
	return Frame{Type: t, Flags: plain[1], Circuit: circuit, Payload: plain[HeaderSize:]}, nil
}
