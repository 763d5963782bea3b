package link

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/gridlink/gridlink/vconn"
)

// BenchmarkLinkLoopback moves 256 MiB per round over one-stream links on
// loopback, TLS and authenticated plain, direct and routed through one
// hub, against plain loopback TCP in the same rounds. It reports the
// median ratio of each to plain TCP over 5 interleaved rounds.
func BenchmarkLinkLoopback(b *testing.B) {
	const size, rounds = 256 << 20, 5
	buf := make([]byte, 256<<10)
	sinkOn := func(l net.Listener) {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					n, _ := io.Copy(io.Discard, c)
					_, _ = c.Write(binary.BigEndian.AppendUint64(nil, uint64(n)))
				}()
			}
		}()
	}
	push := func(c net.Conn) time.Duration {
		start := time.Now()
		for sent := 0; sent < size; sent += len(buf) {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
			b.Fatal(err)
		}
		var ans [8]byte
		if _, err := io.ReadFull(c, ans[:]); err != nil || binary.BigEndian.Uint64(ans[:]) != size {
			b.Fatalf("sink answered %d, %v", binary.BigEndian.Uint64(ans[:]), err)
		}
		c.Close()
		return time.Since(start)
	}
	tcpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer tcpLn.Close()
	sinkOn(tcpLn)
	type kind struct {
		name string
		a    *vconn.Node
		o    Options
	}
	var kinds []kind
	for _, m := range []vconn.Method{vconn.Direct, vconn.Routed} {
		a, bn := site(b, m)
		l, err := Listen(bn, 9, ListenOptions{AllowPlain: true})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		sinkOn(l)
		kinds = append(kinds, kind{string(m) + "-tls", a, Options{}}, kind{string(m) + "-plain", a, Options{Plain: true}})
	}
	for range b.N {
		ratios := map[string][]float64{}
		for r := range rounds + 1 {
			c, err := net.Dial("tcp", tcpLn.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			plain := push(c)
			for _, k := range kinds {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				c, err := Dial(ctx, k.a, "b:9", k.o)
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				d := push(c)
				if r > 0 { // the first round warms up
					ratios[k.name] = append(ratios[k.name], plain.Seconds()/d.Seconds())
				}
			}
			if r > 0 {
				ratios["plain-MB/s"] = append(ratios["plain-MB/s"], size/plain.Seconds()/1e6)
			}
		}
		for name, rs := range ratios {
			slices.Sort(rs)
			b.ReportMetric(rs[len(rs)/2], name)
		}
	}
}
