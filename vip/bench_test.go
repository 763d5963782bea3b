package vip

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/tun"
)

// BenchmarkPath measures the path between two Networks joined by
// net.Pipe: batches of 64 packets of 1400 bytes written into a's device,
// read from b's.
func BenchmarkPath(b *testing.B) {
	g := newGrid(b, 2, nil)
	src, dst := g.nodes[0], g.nodes[1]
	const batch = 64
	pkts := make([][]byte, batch)
	for i := range pkts {
		pkts[i] = append(make([]byte, tun.Offset), udp4(src.v4, dst.v4, "bench", 1400)...)
	}
	b.SetBytes(batch * 1400)
	b.ResetTimer()
	for range b.N {
		if _, err := src.app.Write(pkts, tun.Offset); err != nil {
			b.Fatal(err)
		}
		for range batch {
			<-dst.in
		}
	}
}

// The sender's and the receiver's side of the carrier, before (every
// packet copied out of the device's buffer, then framed into a
// bufio.Writer, which copies it again; frames read through a
// bufio.Reader, which copies every packet once more) and after (framed
// in place in the device's buffer, written as one batch of buffers;
// large frames read straight into the packet's buffer). Packets of
// 65495 bytes (a TCP segment at the default MTU 65535) and of 1400.

var benchSizes = []int{65495, 1400}

// oldClone and oldSend are the sender before: vip.clone and the bufio
// framing.
var oldPool = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

func oldClone(b []byte) []byte {
	if len(b) > 2048 {
		return append([]byte(nil), b...)
	}
	bp := oldPool.Get().(*[]byte)
	return append((*bp)[:0], b...)
}

func oldRelease(b []byte) {
	if cap(b) == 2048 {
		b = b[:0]
		oldPool.Put(&b)
	}
}

func oldSend(w *bufio.Writer, slots [][]byte, sizes []int) error {
	for i, b := range slots {
		pkt := oldClone(b[tun.Offset : tun.Offset+sizes[i]])
		var h [frameHeader]byte
		binary.BigEndian.PutUint16(h[:], uint16(len(pkt)))
		w.Write(h[:])
		w.Write(pkt)
		oldRelease(pkt)
	}
	return w.Flush()
}

// newSend is the sender after: own (the device's buffer kept, a fresh
// one read into next) and frameWriter.
func newSend(w *frameWriter, c net.Conn, slots []*pbuf, sizes []int, batch []*pbuf) error {
	batch = batch[:0]
	for i, rb := range slots {
		rb.n = sizes[i]
		q := own(rb)
		if q == rb {
			slots[i] = bigBuf(len(rb.b))
		}
		batch = append(batch, q)
	}
	err := w.write(c, batch)
	for _, p := range batch {
		p.release()
	}
	return err
}

// tlsConn is a TLS connection written as vconn.Conn writes it: large
// writes' records and batches gathered (pki.WriteRecords,
// pki.WriteBuffers).
type tlsConn struct{ *tls.Conn }

func (c tlsConn) Write(p []byte) (int, error)               { return pki.WriteRecords(c.Conn, p) }
func (c tlsConn) WriteBuffers(bufs [][]byte) (int64, error) { return pki.WriteBuffers(c.Conn, bufs) }

// discardConn takes every write, as a connection that never waits.
type discardConn struct{ net.Conn }

func (discardConn) Write(p []byte) (int, error) { return len(p), nil }

// benchCert is a self-signed certificate for benchmarks' TLS.
func benchCert(b *testing.B) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"bench"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// benchCarrier is a TLS 1.3 connection over loopback TCP whose far end
// reads and drops everything.
func benchCarrier(b *testing.B) net.Conn {
	cert := benchCert(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
		io.Copy(io.Discard, s)
		s.Close()
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c := tls.Client(pki.NoReadAhead(raw), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err := c.Handshake(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return tlsConn{c}
}

// BenchmarkSend: one batch of 16 packets read from the device and
// written to the carrier: to a connection that takes everything
// (discard: our copies and allocations alone) and to a TLS connection
// over loopback TCP (tls: with AES-GCM and the system calls).
func BenchmarkSend(b *testing.B) {
	const batchLen = 16
	for _, size := range benchSizes {
		for _, carrier := range []string{"discard", "tls"} {
			conn := func(b *testing.B) net.Conn {
				if carrier == "tls" {
					return benchCarrier(b)
				}
				return discardConn{}
			}
			sizes := make([]int, batchLen)
			for i := range sizes {
				sizes[i] = size
			}
			bufSize := tun.Offset + 65535
			b.Run(fmt.Sprintf("before/%s/%d", carrier, size), func(b *testing.B) {
				c := conn(b)
				w := bufio.NewWriterSize(c, 64<<10)
				slots := make([][]byte, batchLen)
				for i := range slots {
					slots[i] = make([]byte, bufSize)
				}
				b.SetBytes(int64(batchLen * size))
				b.ReportAllocs()
				for b.Loop() {
					if err := oldSend(w, slots, sizes); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("after/%s/%d", carrier, size), func(b *testing.B) {
				c := conn(b)
				var w frameWriter
				slots := make([]*pbuf, batchLen)
				for i := range slots {
					slots[i] = bigBuf(bufSize)
				}
				batch := make([]*pbuf, 0, batchLen)
				b.SetBytes(int64(batchLen * size))
				b.ReportAllocs()
				for b.Loop() {
					if err := newSend(&w, c, slots, sizes, batch); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// recordReader repeats a stream of frames, at most a TLS record's
// plaintext (16 KiB) a read, as a TLS connection returns them.
type recordReader struct {
	stream []byte
	off    int
}

func (r *recordReader) Read(p []byte) (int, error) {
	if r.off == len(r.stream) {
		r.off = 0
	}
	n := copy(p[:min(len(p), 16<<10)], r.stream[r.off:])
	r.off += n
	return n, nil
}

// oldReadFrame is the receiver before: frames through a bufio.Reader.
func oldReadFrame(r *bufio.Reader, buf []byte, off int) ([]byte, int, error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return buf, 0, err
	}
	n := int(binary.BigEndian.Uint16(h[:]))
	if cap(buf) < off+n {
		buf = make([]byte, off+max(n, 2048))
	}
	buf = buf[:cap(buf)]
	_, err := io.ReadFull(r, buf[off:off+n])
	return buf, n, err
}

// BenchmarkReceive: 16 frames read from the carrier into the buffers
// written to the device.
func BenchmarkReceive(b *testing.B) {
	const batchLen = 16
	for _, size := range benchSizes {
		var stream []byte
		for range batchLen {
			stream = appendFrame(stream, make([]byte, size))
		}
		b.Run(fmt.Sprintf("before/%d", size), func(b *testing.B) {
			r := bufio.NewReaderSize(&recordReader{stream: stream}, frameHeader+maxFrame+1<<10)
			bufs := make([][]byte, batchLen)
			b.SetBytes(int64(batchLen * size))
			b.ReportAllocs()
			for b.Loop() {
				for i := range bufs {
					var err error
					if bufs[i], _, err = oldReadFrame(r, bufs[i], tun.Offset); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(fmt.Sprintf("after/%d", size), func(b *testing.B) {
			r := newFrameReader(&recordReader{stream: stream}, readBuffer)
			bufs := make([][]byte, batchLen)
			b.SetBytes(int64(batchLen * size))
			b.ReportAllocs()
			for b.Loop() {
				for i := range bufs {
					var err error
					if bufs[i], _, err = r.readFrame(bufs[i], tun.Offset); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
