package gridlink

import (
	"context"
	"io"
	"net"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/metrics"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

// routedPair is a routed connection between two nodes through one hub on
// loopback (end-to-end TLS over the circuit, as every routed connection),
// its far end a sink that acknowledges each round. counted: the hub and
// the nodes count (their defaults) and serve /metrics, which a scraper
// reads every 100 ms (a Prometheus scrapes every 15 s or so); otherwise
// nothing counts and nothing is served.
func routedPair(b *testing.B, counted bool, round int64) net.Conn {
	b.Helper()
	key, err := identity.NewKey()
	if err != nil {
		b.Fatal(err)
	}
	creds, err := pki.NewCredentials(key)
	if err != nil {
		b.Fatal(err)
	}
	h, err := hubserver.New(hubserver.Config{Name: "bench", Creds: creds, Listen: "127.0.0.1:0", Logf: func(string, ...any) {}, NoCounters: !counted})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Serve(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	node := func(name string) *vconn.Node {
		n, err := vconn.Start(context.Background(), vconn.Config{Name: name, ListenAddr: "127.0.0.1", Hubs: []string{h.Addr().String()},
			Methods: []vconn.Method{vconn.Routed}, NoCounters: !counted})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { n.Close() })
		return n
	}
	src, dst := node("src"), node("dst")
	l, err := dst.Listen(9)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.(*vconn.Conn).KeepTLS()
		benchSink(c, round)
	}()
	if counted {
		var addrs []string
		for _, c := range []prometheus.Collector{hubMetrics(h), nodeMetrics(src), nodeMetrics(dst)} {
			s, err := metrics.Listen("127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			if err := s.Serve(c); err != nil {
				b.Fatal(err)
			}
			addrs = append(addrs, "http://"+s.Addr().String()+"/metrics")
		}
		go scrapeEvery(ctx, 100*time.Millisecond, addrs)
	}
	c, err := src.Dial(context.Background(), "dst:9")
	if err != nil {
		b.Fatal(err)
	}
	c.KeepTLS()
	b.Cleanup(func() { c.Close() })
	if counted {
		testwait.Until(b, "the metrics to count the setup", 5*time.Second, func() bool {
			return src.Counters().SetupTimes[3].Count > 0
		})
	}
	return c
}

// scrapeEvery GETs every address each period until ctx is done.
func scrapeEvery(ctx context.Context, period time.Duration, addrs []string) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, a := range addrs {
			if resp, err := http.Get(a); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}
}

// benchSink reads size bytes per round and acknowledges each round with
// a byte.
func benchSink(c net.Conn, size int64) {
	defer c.Close()
	buf := make([]byte, 256<<10)
	for {
		if _, err := io.CopyBuffer(io.Discard, io.LimitReader(c, size), buf); err != nil {
			return
		}
		if _, err := c.Write([]byte{1}); err != nil {
			return
		}
	}
}

// benchRound sends size bytes and waits for the acknowledgement.
func benchRound(b *testing.B, c net.Conn, buf []byte, size int64) time.Duration {
	start := time.Now()
	for sent := int64(0); sent < size; {
		n, err := c.Write(buf[:min(int64(len(buf)), size-sent)])
		if err != nil {
			b.Fatal(err)
		}
		sent += int64(n)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkMetricsCost streams routed through a hub on loopback twice in
// the same run: with the counters of hub and nodes and their /metrics
// scraped every 100 ms, and with counting off and nothing served;
// alternating rounds, so that both see the same machine. Reported: MB/s
// of each, the cost (1 - counted/uncounted) of the totals and the
// median cost of neighbouring rounds, in percent. The target: at most 2%.
func BenchmarkMetricsCost(b *testing.B) {
	const size, rounds = 64 << 20, 6
	counted, bare := routedPair(b, true, size), routedPair(b, false, size)
	buf := make([]byte, 256<<10)
	for range 2 { // warm up both
		benchRound(b, counted, buf, size)
		benchRound(b, bare, buf, size)
	}
	var tCounted, tBare time.Duration
	var costs []float64
	b.SetBytes(size * rounds)
	b.ResetTimer()
	for range b.N {
		for i := range rounds {
			var c, u time.Duration
			if i%2 == 0 { // either goes first half the time
				c = benchRound(b, counted, buf, size)
				u = benchRound(b, bare, buf, size)
			} else {
				u = benchRound(b, bare, buf, size)
				c = benchRound(b, counted, buf, size)
			}
			tCounted += c
			tBare += u
			costs = append(costs, 100*(1-u.Seconds()/c.Seconds()))
		}
	}
	b.StopTimer()
	sort.Float64s(costs)
	mbps := func(d time.Duration) float64 { return float64(size) * float64(rounds*b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(tCounted), "counted-MB/s")
	b.ReportMetric(mbps(tBare), "uncounted-MB/s")
	b.ReportMetric(100*(1-mbps(tCounted)/mbps(tBare)), "cost-%")
	b.ReportMetric(costs[len(costs)/2], "cost-median-%")
	b.Logf("per-round costs in %%: %.1f", costs)
}
