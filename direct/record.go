package direct

import (
	"errors"
	"fmt"
	"io"
	"net"
)

// TLS record layer constants for ReadFirstRecord.
const (
	recordHeader    = 5     // content type, version (2), length (2)
	recordHandshake = 0x16  // content type of a ClientHello's record
	maxRecord       = 16640 // 2^14 plus what TLS 1.2 allows for expansion
)

// ErrNotTLS is returned by ReadFirstRecord for bytes that do not start a
// TLS handshake record.
var ErrNotTLS = errors.New("not a TLS handshake")

// ReadFirstRecord reads from r, after the bytes have (at most the
// record header's 5) already read from it, up to the end of the first TLS record (which, from a TLS client, is
// its ClientHello), and returns every byte read, have included, for the
// handshake to replay. The caller bounds the time it takes (a read
// deadline: FirstBytesTimeout).
func ReadFirstRecord(r io.Reader, have []byte) ([]byte, error) {
	if len(have) > recordHeader {
		return nil, fmt.Errorf("direct: ReadFirstRecord given %d bytes already read, at most %d", len(have), recordHeader)
	}
	buf := make([]byte, recordHeader, recordHeader+512)
	n := copy(buf, have)
	if n < recordHeader {
		if _, err := io.ReadFull(r, buf[n:]); err != nil {
			return nil, err
		}
	}
	size, err := recordSize(buf)
	if err != nil {
		return nil, err
	}
	buf = append(buf, make([]byte, size)...)
	if _, err := io.ReadFull(r, buf[recordHeader:]); err != nil {
		return nil, err
	}
	return buf, nil
}

// recordSize checks a first record's header and returns the size of its
// body.
func recordSize(hdr []byte) (int, error) {
	if hdr[0] != recordHandshake {
		return 0, fmt.Errorf("%w: first byte %#02x", ErrNotTLS, hdr[0])
	}
	size := int(hdr[3])<<8 | int(hdr[4])
	if size == 0 || size > maxRecord {
		return 0, fmt.Errorf("%w: first record of %d bytes", ErrNotTLS, size)
	}
	return size, nil
}

// ReplayConn is a connection whose first reads return Pending (bytes read
// from it before, e.g. by ReadFirstRecord).
type ReplayConn struct {
	net.Conn
	Pending []byte
}

func (c *ReplayConn) Read(p []byte) (int, error) {
	if len(c.Pending) > 0 {
		n := copy(p, c.Pending)
		c.Pending = c.Pending[n:]
		if len(c.Pending) == 0 {
			c.Pending = nil // an empty tail still holds the record's buffer: a hub keeps thousands of these
		}
		return n, nil
	}
	return c.Conn.Read(p)
}
