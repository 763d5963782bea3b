package vip

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Framing of a peer connection: in each direction a stream of frames, each
//
//	2 bytes  n, big-endian: the length of the packet that follows
//	n bytes  one IP packet, exactly as read from the sender's device
//
// with 20 <= n (the smallest IP header); n <= 65535 by its width. Nothing
// else travels on the connection: the peer's identity is the
// connection's (vconn authenticates it end to end), and the receiver
// checks every packet's header again (Parse). The sender writes the
// frames of all the packets queued for the peer in one write (up to
// writeBuffer bytes); the receiver writes the packets its buffer holds
// whole to the device in one batch.
const (
	frameHeader = 2
	minFrame    = ipv4MinHeader
	maxFrame    = 0xffff

	writeBuffer = 64 << 10
	readBuffer  = frameHeader + maxFrame + 1<<10
)

// ErrBadFrame matches every FrameError.
var ErrBadFrame = errors.New("vip: bad frame")

// FrameError is the refusal of a frame whose length cannot be a packet.
// The stream has lost its framing: the connection is closed.
type FrameError struct {
	Len int
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("vip: bad frame: length %d is below the smallest IP header (%d bytes)", e.Len, minFrame)
}

func (e *FrameError) Unwrap() error { return ErrBadFrame }

// writeFrame appends the frame of pkt to w.
func writeFrame(w *bufio.Writer, pkt []byte) error {
	var h [frameHeader]byte
	binary.BigEndian.PutUint16(h[:], uint16(len(pkt)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(pkt)
	return err
}

// readFrame reads the next frame's packet into buf[off:], growing buf
// when it is too small, and returns buf (maybe new) and the packet's
// length. A stream that ends inside a frame is io.ErrUnexpectedEOF; one
// that ends between frames io.EOF.
func readFrame(r *bufio.Reader, buf []byte, off int) ([]byte, int, error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return buf, 0, err
	}
	n := int(binary.BigEndian.Uint16(h[:]))
	if n < minFrame {
		return buf, 0, &FrameError{Len: n}
	}
	if cap(buf) < off+n {
		buf = make([]byte, off+max(n, 2048))
	}
	buf = buf[:cap(buf)]
	if _, err := io.ReadFull(r, buf[off:off+n]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return buf, 0, err
	}
	return buf, n, nil
}

// frameReady reports whether r holds a whole frame, so that reading it
// does not wait.
func frameReady(r *bufio.Reader) bool {
	if r.Buffered() < frameHeader {
		return false
	}
	h, _ := r.Peek(frameHeader)
	return r.Buffered() >= frameHeader+int(binary.BigEndian.Uint16(h))
}
