package link

import (
	"io"
	"math/rand/v2"
	"net"
	"slices"
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

// BenchmarkCompression moves log-like text (TextData) and random bytes for
// a second each through a Writer and Reader over two loopback TCP
// connections with each Compression, against CompressOff with the same
// data: loopback is a very fast network, where compressing has little to
// gain and CompressAuto must cost little (a second is ten of its
// windows). The settings take turns, three rounds; each setting's rate is
// its median. It reports the rate with
// compression off, each setting's rate as a ratio of it (ratio-*), and
// the share of the stream auto put on the wire (wire-*-auto).
func BenchmarkCompression(b *testing.B) {
	const period, rounds = time.Second, 3
	text := TextData(1, 32<<20)
	random := randomData(rand.New(rand.NewPCG(9, 10)), 32<<20)
	push := func(cfg Config, src []byte) (float64, WriterStats) {
		var ws, rs []net.Conn
		for range 2 {
			w, r := benchTCP(b)
			ws, rs = append(ws, w), append(rs, r)
		}
		w, r := NewWriter(cfg, ws...), NewReader(cfg, rs...)
		done := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, r); done <- err }()
		start := time.Now()
		sent := 0
		for time.Since(start) < period {
			if _, err := w.Write(src[sent%len(src):][:1<<20]); err != nil {
				b.Fatal(err)
			}
			sent += 1 << 20
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		return float64(sent) / time.Since(start).Seconds() / 1e6, w.Stats()
	}
	modes := []Compression{CompressOff, CompressS2, CompressZstd, CompressAuto}
	for range b.N {
		for _, d := range []struct {
			name string
			data []byte
		}{{"text", text}, {"random", random}} {
			rates := make([][]float64, len(modes))
			var auto WriterStats
			for range rounds {
				for i, c := range modes {
					rate, st := push(Config{Compression: c}, d.data)
					rates[i] = append(rates[i], rate)
					if c == CompressAuto {
						auto = st
					}
				}
			}
			off := median(rates[0])
			b.ReportMetric(off, d.name+"-off-MB/s")
			for i, c := range modes[1:] {
				b.ReportMetric(median(rates[i+1])/off, "ratio-"+d.name+"-"+c.String())
			}
			b.ReportMetric(float64(auto.Wire)/float64(auto.Written), "wire-"+d.name+"-auto")
			b.Logf("%s: rates (MB/s) %v for %v; auto: %s; blocks %+v", d.name, rates, modes, auto.Adaptive, auto.Blocks)
		}
	}
}

// BenchmarkCompressionSlowLink moves text and random bytes for three
// seconds with each Compression over four loopback TCP connections that
// share an emulated 400 Mbit/s link (no delay, no loss), the rate of the
// lab WAN, against CompressOff. It reports the rate with compression off
// and each setting's rate as a ratio of it: the in-process forecast of
// the lab's targets (text at least 2, random at least 0.95 with auto).
func BenchmarkCompressionSlowLink(b *testing.B) {
	const period, rate = 3 * time.Second, 50e6
	text := TextData(1, 32<<20)
	random := randomData(rand.New(rand.NewPCG(9, 10)), 32<<20)
	push := func(cfg Config, src []byte) (float64, WriterStats) {
		l := newRateLink(rate)
		var ws, rs []net.Conn
		for range 4 {
			w, r := benchTCP(b)
			ws, rs = append(ws, l.conn(w)), append(rs, r)
		}
		w, r := NewWriter(cfg, ws...), NewReader(cfg, rs...)
		done := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, r); done <- err }()
		start := time.Now()
		sent := 0
		for time.Since(start) < period {
			if _, err := w.Write(src[sent%len(src):][:1<<20]); err != nil {
				b.Fatal(err)
			}
			sent += 1 << 20
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		return float64(sent) / time.Since(start).Seconds() / 1e6, w.Stats()
	}
	for range b.N {
		for _, d := range []struct {
			name string
			data []byte
		}{{"text", text}, {"random", random}} {
			off, _ := push(Config{}, d.data)
			b.ReportMetric(off, d.name+"-off-MB/s")
			for _, c := range []Compression{CompressS2, CompressZstd, CompressAuto} {
				r, st := push(Config{Compression: c}, d.data)
				b.ReportMetric(r/off, "ratio-"+d.name+"-"+c.String())
				if c == CompressAuto {
					b.Logf("%s: auto %.1f MB/s: %s; blocks %+v", d.name, r, st.Adaptive, st.Blocks)
				}
			}
		}
	}
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// benchTCP returns a connected loopback TCP pair.
func benchTCP(b *testing.B) (net.Conn, net.Conn) {
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
