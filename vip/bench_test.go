package vip

import (
	"testing"

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
