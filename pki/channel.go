package pki

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// A TLS handshake can be used to authenticate a connection and agree on
// keys, after which the connection carries its own protocol rather than
// TLS records (hub links do: they seal control frames with the handshake's
// keys and pass data that is already protected end to end as it is). Two
// things make that switch safe: nothing read past the handshake may be
// stuck in the tls.Conn's buffer (NoReadAhead), and both ends must derive
// the same keys, each using one for sending and the other for receiving
// (ChannelKeys).

// recordHeaderLen is the size of a TLS record header: type, version (2),
// length (2).
const recordHeaderLen = 5

// NoReadAhead wraps conn so that reads through it never go past the end of
// the TLS record being read. A tls.Conn over it therefore holds no bytes
// beyond its handshake once the handshake returns, and conn can carry
// another protocol from there on. (TLS 1.3 sends nothing after the
// handshake unless session tickets are on; Credentials keep them off.)
// A connection already wrapped is returned as it is.
//
// Reading a record in two reads (header, then body) costs nothing
// measurable: BenchmarkTLSRead.
func NoReadAhead(conn net.Conn) net.Conn {
	if rc, ok := conn.(*recordConn); ok {
		return rc
	}
	return &recordConn{Conn: conn}
}

// Write writes what tc gives it at once, or gathers it while a
// WriteRecords call is under way.
func (c *recordConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return 0, c.werr // records after a lost batch would corrupt the stream
	}
	if c.batching == 0 {
		return c.Conn.Write(p)
	}
	if len(c.wbuf)+len(p) > maxBatch {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	c.wbuf = append(c.wbuf, p...)
	return len(p), nil
}

func (c *recordConn) flushLocked() error {
	if len(c.wbuf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.wbuf)
	c.wbuf = c.wbuf[:0]
	if err != nil {
		c.werr = err
	}
	return err
}

// maxBatch bounds what WriteRecords gathers before writing.
const maxBatch = 256 << 10

// WriteRecords writes p through tc, giving the connection beneath the
// records it makes in as few writes as fit in 256 KiB, instead of one
// write per 16 KiB record. tc must run over NoReadAhead (else it is
// tc.Write).
func WriteRecords(tc *tls.Conn, p []byte) (int, error) {
	rc, ok := tc.NetConn().(*recordConn)
	if !ok || len(p) <= 16<<10 {
		return tc.Write(p)
	}
	rc.wmu.Lock()
	rc.batching++
	rc.wmu.Unlock()
	n, err := tc.Write(p)
	rc.wmu.Lock()
	rc.batching--
	ferr := rc.flushLocked()
	rc.wmu.Unlock()
	if err == nil && ferr != nil {
		err, n = ferr, 0 // how much of p arrived is unknown; the connection is broken
	}
	return n, err
}

// WriteBuffers writes each of bufs through tc, as WriteRecords writes
// one: the records of all of them go to the connection beneath in as
// few writes as fit in 256 KiB. tc must run over NoReadAhead (else it
// is a tc.Write of each).
func WriteBuffers(tc *tls.Conn, bufs [][]byte) (int64, error) {
	var n int64
	rc, ok := tc.NetConn().(*recordConn)
	if !ok || len(bufs) == 1 {
		for _, b := range bufs {
			m, err := WriteRecords(tc, b)
			n += int64(m)
			if err != nil {
				return n, err
			}
		}
		return n, nil
	}
	rc.wmu.Lock()
	rc.batching++
	rc.wmu.Unlock()
	var err error
	for _, b := range bufs {
		var m int
		m, err = tc.Write(b)
		n += int64(m)
		if err != nil {
			break
		}
	}
	rc.wmu.Lock()
	rc.batching--
	ferr := rc.flushLocked()
	rc.wmu.Unlock()
	if err == nil && ferr != nil {
		err, n = ferr, 0 // how much arrived is unknown; the connection is broken
	}
	return n, err
}

// ReadAhead lets tc read ahead of its records again, from the next record
// boundary on, for a connection that stays TLS: it saves a read per
// record. Beneath cannot be used after it.
func ReadAhead(tc *tls.Conn) {
	if rc, ok := tc.NetConn().(*recordConn); ok {
		rc.ahead.Store(true)
	}
}

// Beneath returns the connection under tc's records, for a protocol that
// authenticates with a TLS handshake and then carries data in the clear
// (link's authenticated-plain mode): the caller stops using tc and reads
// and writes the returned connection. tc must run over NoReadAhead, the
// last record read through tc must have been consumed whole by the
// application, and neither end may send TLS records from then on: the
// protocol on top decides the point where both ends switch.
func Beneath(tc *tls.Conn) (net.Conn, error) {
	rc, ok := tc.NetConn().(*recordConn)
	if !ok {
		return nil, errors.New("pki: TLS connection not over NoReadAhead: it may have read past its records")
	}
	if rc.ahead.Load() {
		return nil, errors.New("pki: TLS connection reads ahead of its records (ReadAhead)")
	}
	if rc.nhdr != 0 || rc.left != 0 {
		return nil, errors.New("pki: TLS connection is in the middle of a record")
	}
	return rc.Conn, nil
}

type recordConn struct {
	net.Conn
	ahead atomic.Bool // reads may run ahead again (ReadAhead)

	wmu      sync.Mutex // guards the fields below
	batching int        // WriteRecords calls under way
	wbuf     []byte     // records gathered while batching
	werr     error      // a failed write of gathered records: the stream is broken
	hdr      [recordHeaderLen]byte
	nhdr     int // header bytes read of the current record
	left     int // body bytes of the current record still to read
}

func (c *recordConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.left == 0 && c.nhdr == 0 && c.ahead.Load() {
		return c.Conn.Read(p)
	}
	if c.left == 0 {
		// Read the next record's header exactly, handing its bytes over
		// as they arrive.
		n, err := c.Conn.Read(c.hdr[c.nhdr:recordHeaderLen][:min(recordHeaderLen-c.nhdr, len(p))])
		copy(p, c.hdr[c.nhdr:c.nhdr+n])
		c.nhdr += n
		if c.nhdr == recordHeaderLen {
			c.nhdr, c.left = 0, int(c.hdr[3])<<8|int(c.hdr[4])
		}
		return n, err
	}
	n, err := c.Conn.Read(p[:min(len(p), c.left)])
	c.left -= n
	return n, err
}

// keyLen is the size of each channel key: AES-256.
const keyLen = 32

// ChannelKeys derives two keys from a finished TLS 1.3 handshake, one per
// direction, under label (which names the protocol that uses them). client
// says which end tc is: the client's send key is the server's receive key
// and the other way round.
func ChannelKeys(tc *tls.Conn, label string, client bool) (send, recv []byte, err error) {
	st := tc.ConnectionState()
	if !st.HandshakeComplete {
		return nil, nil, errors.New("pki: channel keys before the handshake finished")
	}
	if st.Version != tls.VersionTLS13 {
		return nil, nil, fmt.Errorf("pki: channel keys need TLS 1.3, have %#x", st.Version)
	}
	km, err := st.ExportKeyingMaterial(label, nil, 2*keyLen)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: channel keys: %w", err)
	}
	c2s, s2c := km[:keyLen], km[keyLen:]
	if client {
		return c2s, s2c, nil
	}
	return s2c, c2s, nil
}
