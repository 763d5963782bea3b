package link

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/gridlink/gridlink/vconn"
)

// BenchmarkResumeCost measures what resumability costs a direct link:
// 128 MiB per round over loopback through direct links with one stream
// and with three, each with and without Options.Resume, and one stream
// carrying blocks without resume (what blocks cost, apart), every kind
// once per round in a random order. It reports, for each stream count,
// the median over 5 rounds of the ratio of the resumable link's
// throughput to the same link's without (1 = free; over one stream the
// link without is the bare connection, with the blocks' cost too:
// blocks/plain and resume/blocks split it), and the plain link's MB/s.
// Loopback makes the CPU the bottleneck: the worst case for the cost,
// which on a wide-area link is the CPU time per byte that the network
// leaves idle anyway.
func BenchmarkResumeCost(b *testing.B) {
	const size, rounds = 128 << 20, 5
	a, bn := site(b, vconn.Direct)
	l, err := Listen(bn, 9, ListenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	sinkAll(b, l)
	buf := make([]byte, 256<<10)
	push := func(o Options) time.Duration {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := Dial(ctx, a, "b:9", o)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		if c.Resumable() != o.Resume {
			b.Fatalf("resumable %v with %+v", c.Resumable(), o)
		}
		start := time.Now()
		for sent := 0; sent < size; sent += len(buf) {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		if err := c.CloseWrite(); err != nil {
			b.Fatal(err)
		}
		ans, err := io.ReadAll(c)
		if err != nil || len(ans) != 8 || binary.BigEndian.Uint64(ans) != size {
			b.Fatalf("sink answered %x, %v", ans, err)
		}
		took := time.Since(start)
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
		return took
	}
	type kind struct {
		name string
		o    Options
	}
	var kinds []kind
	for _, streams := range []int{1, 3} {
		for _, resume := range []bool{false, true} {
			kinds = append(kinds, kind{fmt.Sprintf("%d-%v", streams, resume), Options{Streams: streams, Resume: resume}})
		}
	}
	// blocks over one stream, not resumable: what the blocks cost, apart
	kinds = append(kinds, kind{"1-blocks", Options{blocks: true}})
	for range b.N {
		ratios := map[string][]float64{}
		for r := range rounds + 1 {
			took := map[string]time.Duration{}
			for _, i := range rand.Perm(len(kinds)) {
				took[kinds[i].name] = push(kinds[i].o)
			}
			if r == 0 {
				continue // the first round warms up
			}
			ratios["blocks/plain-1stream"] = append(ratios["blocks/plain-1stream"], took["1-false"].Seconds()/took["1-blocks"].Seconds())
			ratios["resume/blocks-1stream"] = append(ratios["resume/blocks-1stream"], took["1-blocks"].Seconds()/took["1-true"].Seconds())
			for _, streams := range []int{1, 3} {
				plain, resumable := took[fmt.Sprintf("%d-false", streams)], took[fmt.Sprintf("%d-true", streams)]
				ratios[fmt.Sprintf("resume/plain-%dstream", streams)] = append(ratios[fmt.Sprintf("resume/plain-%dstream", streams)], plain.Seconds()/resumable.Seconds())
				ratios[fmt.Sprintf("plain-%dstream-MB/s", streams)] = append(ratios[fmt.Sprintf("plain-%dstream-MB/s", streams)], size/plain.Seconds()/1e6)
			}
		}
		for name, rs := range ratios {
			slices.Sort(rs)
			b.ReportMetric(rs[len(rs)/2], name)
		}
	}
	var _ net.Conn = (*Conn)(nil)
}
