package hubserver

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
)

// benchTrunk starts two linked hubs on loopback with cfg's Lanes and
// Congestion (the second dials the first) and returns them once routed.
func benchTrunk(b *testing.B, lanes int, congestion string) (*Hub, *Hub) {
	b.Helper()
	var hubs []*Hub
	for i := range 2 {
		var peers []string
		if i > 0 {
			peers = []string{hubs[0].Addr().String()}
		}
		h, err := New(Config{Name: fmt.Sprintf("h%d", i), Creds: creds(b), Listen: "127.0.0.1:0", Peers: peers, Logf: quiet, Lanes: lanes, Congestion: congestion})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { h.Serve(ctx); close(done) }()
		b.Cleanup(func() { cancel(); <-done })
		hubs = append(hubs, h)
	}
	want := max(lanes, 1)
	testwait.Until(b, "the hubs to link and route", 10*time.Second, func() bool {
		p := trunkTo(hubs[1], hubs[0].ID())
		return p != nil && p.laneCount() == want && hubs[0].nextHop(hubs[1].ID()) != nil
	})
	return hubs[0], hubs[1]
}

// trunkStreams opens n routed connections (end-to-end TLS on circuits)
// from a node at one hub to a node at the other.
func trunkStreams(b *testing.B, h0, h1 *Hub, n int, size int64) []net.Conn {
	s1, c1 := benchNode(b, "n1", h0)
	s2, c2 := benchNode(b, "n2", h1)
	var out []net.Conn
	for range n {
		out = append(out, routedTLS(b, s1, s2, c1, c2, sink(size)))
	}
	return out
}

// pushAll runs pushRound on every stream at once.
func pushAll(cs []net.Conn, size int64) error {
	var wg sync.WaitGroup
	errs := make([]error, len(cs))
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = pushRound(c, make([]byte, 256<<10), size)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// benchTrunkSettings streams between nodes at two hubs on loopback, in
// alternating rounds, over two pairs of hubs that differ only in their
// trunk settings (old: as before lanes; new), so that both see the same
// machine. Reported: MB/s of each, the ratio of the totals (new/old) and
// the median of the ratios of neighbouring rounds.
func benchTrunkSettings(b *testing.B, streams int, oldLanes int, oldCC string, newLanes int, newCC string) {
	const size, rounds = 64 << 20, 4
	per := int64(size / streams)
	o0, o1 := benchTrunk(b, oldLanes, oldCC)
	n0, n1 := benchTrunk(b, newLanes, newCC)
	old := trunkStreams(b, o0, o1, streams, per)
	cur := trunkStreams(b, n0, n1, streams, per)
	for range 2 { // warm up: windows, slow start
		if err := pushAll(old, per); err != nil {
			b.Fatal(err)
		}
		if err := pushAll(cur, per); err != nil {
			b.Fatal(err)
		}
	}
	var tOld, tNew time.Duration
	var ratios []float64
	b.SetBytes(2 * size * rounds)
	b.ResetTimer()
	for range b.N {
		for range rounds {
			start := time.Now()
			if err := pushAll(old, per); err != nil {
				b.Fatal(err)
			}
			o := time.Since(start)
			start = time.Now()
			if err := pushAll(cur, per); err != nil {
				b.Fatal(err)
			}
			n := time.Since(start)
			tOld += o
			tNew += n
			ratios = append(ratios, o.Seconds()/n.Seconds())
		}
	}
	b.StopTimer()
	sort.Float64s(ratios)
	mbps := func(d time.Duration) float64 {
		return float64(per*int64(streams)) * float64(rounds*b.N) / d.Seconds() / 1e6
	}
	b.ReportMetric(mbps(tOld), "old-MB/s")
	b.ReportMetric(mbps(tNew), "new-MB/s")
	b.ReportMetric(mbps(tNew)/mbps(tOld), "ratio")
	b.ReportMetric(ratios[len(ratios)/2], "ratio-median")
}

// BenchmarkRoutedTrunk: routed loopback throughput across a trunk between
// two hubs, one stream, with the hubs' defaults (lanes by round trip: one
// on loopback; bbr where the kernel has it) against the settings before
// lanes (one connection, the kernel's congestion control).
func BenchmarkRoutedTrunk(b *testing.B) {
	benchTrunkSettings(b, 1, 1, "default", 0, "")
}

// BenchmarkRoutedTrunkLanes: 4 streams across a trunk of 4 connections
// against a trunk of one (both bbr where the kernel has it).
func BenchmarkRoutedTrunkLanes(b *testing.B) {
	benchTrunkSettings(b, 4, 1, "", 4, "")
}
