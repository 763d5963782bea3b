package vip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
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
// frames of all the packets queued for the peer in one batch (a
// connection's WriteBuffers, else net.Buffers: writev), each large
// packet framed in place in the buffer the device was read into (buf.go),
// the small ones gathered into one buffer; the receiver writes the
// packets its buffer holds whole to the device in one batch, and reads a
// large packet's bytes past what it holds straight into the packet's
// buffer.
const (
	frameHeader = 2
	minFrame    = ipv4MinHeader
	maxFrame    = 0xffff

	// gatherBuffer is the most bytes of small frames gathered into one
	// buffer of a batch.
	gatherBuffer = 64 << 10
	// readBuffer is the receiver's buffer: more than a TLS record's
	// plaintext (a read on a TLS connection returns one record at most),
	// so that the small frames of a record are written to the device in
	// one batch.
	readBuffer = 32 << 10
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

// appendFrame appends the frame of pkt to b.
func appendFrame(b, pkt []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(pkt)))
	return append(b, pkt...)
}

// BuffersWriter is a connection that writes several buffers as one
// batch (vconn.Conn: their TLS records in few writes).
type BuffersWriter interface {
	WriteBuffers(bufs [][]byte) (int64, error)
}

// frameWriter writes batches of packets to a connection as frames.
type frameWriter struct {
	gather   []byte   // the small frames of a batch
	bufs     [][]byte // what a batch writes
	nb       net.Buffers
	dlConn   net.Conn // the connection whose write deadline is deadline
	deadline time.Time
}

// write writes the frames of batch to c in one batch: each large packet
// framed in place, runs of small ones gathered into one buffer.
func (w *frameWriter) write(c net.Conn, batch []*pbuf) error {
	if w.gather == nil {
		w.gather = make([]byte, 0, gatherBuffer)
	}
	w.gather, w.bufs = w.gather[:0], w.bufs[:0]
	open := -1 // the index in bufs of the run of gathered frames being added to
	start := 0 // where that run starts in gather
	for _, p := range batch {
		if p.n <= smallPacket && len(w.gather)+frameHeader+p.n <= cap(w.gather) {
			if open < 0 {
				open, start = len(w.bufs), len(w.gather)
				w.bufs = append(w.bufs, nil)
			}
			w.gather = appendFrame(w.gather, p.pkt())
			w.bufs[open] = w.gather[start:]
			continue
		}
		open = -1
		w.bufs = append(w.bufs, p.frame())
	}
	var err error
	switch {
	case len(w.bufs) == 1:
		_, err = c.Write(w.bufs[0])
	default:
		if bw, ok := c.(BuffersWriter); ok {
			_, err = bw.WriteBuffers(w.bufs)
		} else {
			w.nb = net.Buffers(w.bufs) // a field: WriteTo's receiver does not escape to the heap each batch
			_, err = w.nb.WriteTo(c)
		}
	}
	clear(w.bufs) // no references to the packets' buffers kept
	w.nb = nil
	return err
}

// frameReader reads frames from a connection. The frames its buffer
// holds whole are copied out of it; of a frame longer than what it
// holds, the rest is read straight into the packet's buffer.
type frameReader struct {
	r      io.Reader
	buf    []byte
	lo, hi int // what buf holds
}

func newFrameReader(r io.Reader, size int) *frameReader {
	return &frameReader{r: r, buf: make([]byte, size)}
}

// fill reads once into the buffer, after what it holds (moved to its
// start first); an error only when nothing came.
func (f *frameReader) fill() error {
	if f.lo > 0 {
		f.hi = copy(f.buf, f.buf[f.lo:f.hi])
		f.lo = 0
	}
	for range 100 {
		n, err := f.r.Read(f.buf[f.hi:])
		f.hi += n
		if n > 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

// readFrame reads the next frame's packet into buf[off:], growing buf
// when it is too small, and returns buf (maybe new) and the packet's
// length. A stream that ends inside a frame is io.ErrUnexpectedEOF; one
// that ends between frames io.EOF.
func (f *frameReader) readFrame(buf []byte, off int) ([]byte, int, error) {
	for f.hi-f.lo < frameHeader {
		if err := f.fill(); err != nil {
			if errors.Is(err, io.EOF) && f.hi > f.lo {
				err = io.ErrUnexpectedEOF
			}
			return buf, 0, err
		}
	}
	n := int(binary.BigEndian.Uint16(f.buf[f.lo:]))
	if n < minFrame {
		return buf, 0, &FrameError{Len: n}
	}
	f.lo += frameHeader
	if cap(buf) < off+n {
		buf = make([]byte, off+max(n, 2048))
	}
	buf = buf[:cap(buf)]
	have := copy(buf[off:off+n], f.buf[f.lo:f.hi])
	f.lo += have
	if have < n {
		if _, err := io.ReadFull(f.r, buf[off+have:off+n]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return buf, 0, err
		}
	}
	return buf, n, nil
}

// ready reports whether the buffer holds a whole frame, so that reading
// it does not wait.
func (f *frameReader) ready() bool {
	held := f.hi - f.lo
	return held >= frameHeader && held >= frameHeader+int(binary.BigEndian.Uint16(f.buf[f.lo:]))
}
