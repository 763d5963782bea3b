package link

import (
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkStriping moves 256 MiB through a Writer and Reader over 1, 2
// and 4 loopback TCP connections, against one plain loopback TCP
// connection measured in the same run: the cost of cutting, sending and
// reassembling blocks (on loopback, more streams cannot add bandwidth).
func BenchmarkStriping(b *testing.B) {
	const size = 256 << 20
	buf := make([]byte, 256<<10)
	tcp := func() (net.Conn, net.Conn) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		acc := make(chan net.Conn, 1)
		go func() { c, _ := ln.Accept(); acc <- c }()
		w, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		return w, <-acc
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
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	mbps := func(d time.Duration) float64 { return size / d.Seconds() / 1e6 }
	for range b.N {
		w, r := tcp()
		plain := push(w, r)
		b.ReportMetric(mbps(plain), "plain-MB/s")
		for _, n := range []int{1, 2, 4} {
			var ws, rs []net.Conn
			for range n {
				w, r := tcp()
				ws, rs = append(ws, w), append(rs, r)
			}
			d := push(NewWriter(Config{}, ws...), NewReader(Config{}, rs...))
			b.ReportMetric(mbps(d)/mbps(plain), "ratio-"+string(rune('0'+n))+"streams")
		}
	}
}
