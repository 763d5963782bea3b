package pki

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkTLSRead moves 256 MiB over loopback TLS 1.3, with the reading
// side's records read whole (tls.Conn's own read-ahead) and through
// NoReadAhead, against plain TCP in the same run.
func BenchmarkTLSRead(b *testing.B) {
	const size = 256 << 20
	buf := make([]byte, 256<<10)
	cli, srv := creds(&testing.T{}, 1), creds(&testing.T{}, 2)
	pair := func(wrap bool) (net.Conn, net.Conn) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		acc := make(chan net.Conn, 1)
		go func() { c, _ := ln.Accept(); acc <- c }()
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		return a, <-acc
	}
	push := func(w io.WriteCloser, r io.Reader) time.Duration {
		done := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, r); done <- err }()
		start := time.Now()
		for sent := 0; sent < size; sent += len(buf) {
			if _, err := w.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		w.Close()
		<-done
		return time.Since(start)
	}
	secure := func(wrap bool) (io.WriteCloser, io.Reader) {
		a, s := pair(wrap)
		if wrap {
			s = NoReadAhead(s)
		}
		type res struct {
			c   *Conn
			err error
		}
		ch := make(chan res, 1)
		go func() {
			c, err := srv.Server(context.Background(), s, nil)
			ch <- res{c, err}
		}()
		c, err := cli.Client(context.Background(), a, srv.Key.ID(), nil)
		if err != nil {
			b.Fatal(err)
		}
		r := <-ch
		if r.err != nil {
			b.Fatal(r.err)
		}
		return c, r.c
	}
	for range b.N {
		a, s := pair(false)
		plain := push(a, s)
		w, r := secure(false)
		tlsd := push(w, r)
		w, r = secure(true)
		nra := push(w, r)
		b.ReportMetric(size/plain.Seconds()/1e6, "plain-MB/s")
		b.ReportMetric(plain.Seconds()/tlsd.Seconds(), "tls-ratio")
		b.ReportMetric(plain.Seconds()/nra.Seconds(), "tls-noreadahead-ratio")
	}
}
