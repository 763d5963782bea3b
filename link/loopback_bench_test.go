package link

import (
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/gridlink/gridlink/vconn"
)

// BenchmarkLinkLoopback moves 256 MiB per round over one-stream links on
// loopback, TLS and authenticated plain, direct and routed through one
// hub, against plain loopback TCP in the same rounds. It reports the
// median ratio of each to plain TCP over 5 rounds, each running every kind once in a random order.
func BenchmarkLinkLoopback(b *testing.B) {
	const size, rounds = 256 << 20, 5
	buf := make([]byte, 256<<10)
	tcpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer tcpLn.Close()
	sinkAll(b, tcpLn)
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
		sinkAll(b, l)
		kinds = append(kinds, kind{string(m) + "-tls", a, Options{}}, kind{string(m) + "-plain", a, Options{Plain: true}})
	}
	tcpDial := func() net.Conn {
		c, err := net.Dial("tcp", tcpLn.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	for range b.N {
		ratios := map[string][]float64{}
		for r := range rounds + 1 {
			// Every kind once per round, in a new random order: a loaded
			// VM's speed drifts within a round too.
			took := map[string]time.Duration{}
			for _, i := range rand.Perm(len(kinds) + 1) {
				if i == len(kinds) {
					took["tcp"] = pushAll(b, tcpDial(), buf, size)
					continue
				}
				k := kinds[i]
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				c, err := Dial(ctx, k.a, "b:9", k.o)
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				took[k.name] = pushAll(b, c, buf, size)
			}
			if r == 0 {
				continue // the first round warms up
			}
			for _, k := range kinds {
				ratios[k.name] = append(ratios[k.name], took["tcp"].Seconds()/took[k.name].Seconds())
			}
			ratios["plain-MB/s"] = append(ratios["plain-MB/s"], size/took["tcp"].Seconds()/1e6)
		}
		for name, rs := range ratios {
			slices.Sort(rs)
			b.ReportMetric(rs[len(rs)/2], name)
		}
	}
}

// sinkAll serves l: each connection is read to its end with the same
// 256 KiB reads for every kind (io.Copy would pick different buffer sizes
// for a *net.TCPConn), then answered with the count of bytes read.
func sinkAll(b *testing.B, l net.Listener) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				rbuf := make([]byte, 256<<10)
				var n int64
				for {
					k, err := c.Read(rbuf)
					n += int64(k)
					if err != nil {
						break
					}
				}
				_, _ = c.Write(binary.BigEndian.AppendUint64(nil, uint64(n)))
				if cw, ok := c.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				}
			}()
		}
	}()
}

// pushAll writes size bytes to c in writes of buf, closes its write side,
// waits for the sink's count and returns how long it all took.
func pushAll(b *testing.B, c net.Conn, buf []byte, size int) time.Duration {
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
	if _, err := io.ReadFull(c, ans[:]); err != nil || binary.BigEndian.Uint64(ans[:]) != uint64(size) {
		b.Fatalf("sink answered %d, %v", binary.BigEndian.Uint64(ans[:]), err)
	}
	c.Close()
	return time.Since(start)
}
