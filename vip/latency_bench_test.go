package vip

import (
	"context"
	"crypto/tls"
	"net"
	"testing"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/tun"
)

// tlsDialer joins two Networks by a TLS 1.3 connection over loopback
// TCP, as vconn's are: over pki.NoReadAhead, its reads ahead of the
// records again (pki.ReadAhead: vconn.Conn.KeepTLS) when ahead is set.
type tlsDialer struct {
	g     *grid
	from  identity.ID
	cert  tls.Certificate
	ahead bool
}

func (d *tlsDialer) DialPeer(ctx context.Context, id identity.ID) (net.Conn, error) {
	d.g.mu.Lock()
	to := d.g.byID[id]
	d.g.mu.Unlock()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	type accepted struct {
		c   *tls.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			ch <- accepted{err: err}
			return
		}
		s := tls.Server(pki.NoReadAhead(raw), &tls.Config{Certificates: []tls.Certificate{d.cert}, MinVersion: tls.VersionTLS13})
		ch <- accepted{s, s.Handshake()}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	c := tls.Client(pki.NoReadAhead(raw), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err := c.Handshake(); err != nil {
		return nil, err
	}
	s := <-ch
	if s.err != nil {
		return nil, s.err
	}
	if d.ahead {
		pki.ReadAhead(c)
		pki.ReadAhead(s.c)
	}
	if err := to.net.Accept(tlsConn{s.c}, d.from); err != nil {
		return nil, err
	}
	return tlsConn{c}, nil
}

// BenchmarkRoundTrip is the path's own latency: an 84-byte ICMP-sized
// packet from a's device to b's, and the answer back, over TLS on
// loopback; one op is one round trip (the time a ping over the virtual
// network adds to the carrier's round trip, less the wake-ups of idle
// CPUs). records-in-two-reads: a TLS record read as its header and then
// its body (the packet connections before KeepTLS); read-ahead: as vconn
// connections that stay TLS read.
func BenchmarkRoundTrip(b *testing.B) {
	cert := benchCert(b)
	for _, mode := range []string{"records-in-two-reads", "read-ahead"} {
		b.Run(mode, func(b *testing.B) {
			var g *grid
			var dialers []*tlsDialer
			g = newGrid(b, 2, func(c *Config) {
				d := &tlsDialer{from: c.ID, cert: cert, ahead: mode == "read-ahead"}
				dialers = append(dialers, d)
				c.Dialer = d
			})
			for _, d := range dialers {
				d.g = g
			}
			x, y := g.nodes[0], g.nodes[1]
			req := [][]byte{append(make([]byte, tun.Offset), udp4(x.v4, y.v4, "ping", 84)...)}
			rep := [][]byte{append(make([]byte, tun.Offset), udp4(y.v4, x.v4, "pong", 84)...)}
			round := func() {
				if _, err := x.app.Write(req, tun.Offset); err != nil {
					b.Fatal(err)
				}
				<-y.in
				if _, err := y.app.Write(rep, tun.Offset); err != nil {
					b.Fatal(err)
				}
				<-x.in
			}
			round() // the connection set up
			b.ReportAllocs()
			for b.Loop() {
				round()
			}
		})
	}
}
