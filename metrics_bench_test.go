package gridlink

import (
	"context"
	"io"
	"net"
	"net/http"
	"sort"
	"sync/atomic"
	"syscall"
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
// reads every second while scraping is on (15 times as often as a
// Prometheus scraping every 15 s; BenchmarkScrape gives a scrape's CPU
// time); otherwise nothing counts and nothing is served.
func routedPair(b *testing.B, counted bool, round int64, scraping *atomic.Bool) net.Conn {
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
		go scrapeEvery(ctx, time.Second, addrs, scraping)
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

// scrapeEvery GETs every address each period while on, until ctx is
// done.
func scrapeEvery(ctx context.Context, period time.Duration, addrs []string, on *atomic.Bool) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !on.Load() {
			continue
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

// benchRound sends size bytes and waits for the acknowledgement; it
// returns the wall time and the process's CPU time (user and system)
// that took.
func benchRound(b *testing.B, c net.Conn, buf []byte, size int64) (wall, cpu time.Duration) {
	cpu0, start := cpuTime(b), time.Now()
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
	return time.Since(start), cpuTime(b) - cpu0
}

// cpuTime is the CPU time this process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMetricsCost streams routed through a hub on loopback twice in
// the same run: with the counters of hub and nodes and their /metrics
// scraped every second, and with counting off and nothing scraped;
// alternating rounds (either first half the time), so that both see the
// same machine. Reported: MB/s of each; the cost, 1 - counted/uncounted,
// in percent, of the totals' wall time and of the median of neighbouring
// rounds; and of the process's CPU time per byte, which a shared
// machine's other load disturbs less than wall time. The target: at
// most 2%.
func BenchmarkMetricsCost(b *testing.B) {
	const size, rounds = 64 << 20, 10
	var scraping atomic.Bool
	counted, bare := routedPair(b, true, size, &scraping), routedPair(b, false, size, &scraping)
	buf := make([]byte, 256<<10)
	for range 2 { // warm up both
		benchRound(b, counted, buf, size)
		benchRound(b, bare, buf, size)
	}
	var wCounted, wBare, cCounted, cBare time.Duration
	var costs []float64
	roundOf := func(c net.Conn, on bool) (time.Duration, time.Duration) {
		scraping.Store(on)
		return benchRound(b, c, buf, size)
	}
	b.SetBytes(size * rounds)
	b.ResetTimer()
	for range b.N {
		for i := range rounds {
			var wc, cc, wu, cu time.Duration
			if i%2 == 0 {
				wc, cc = roundOf(counted, true)
				wu, cu = roundOf(bare, false)
			} else {
				wu, cu = roundOf(bare, false)
				wc, cc = roundOf(counted, true)
			}
			wCounted += wc
			wBare += wu
			cCounted += cc
			cBare += cu
			costs = append(costs, 100*(1-wu.Seconds()/wc.Seconds()))
		}
	}
	b.StopTimer()
	scraping.Store(false)
	sort.Float64s(costs)
	mbps := func(d time.Duration) float64 { return float64(size) * float64(rounds*b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(wCounted), "counted-MB/s")
	b.ReportMetric(mbps(wBare), "uncounted-MB/s")
	b.ReportMetric(100*(1-wBare.Seconds()/wCounted.Seconds()), "cost-%")
	b.ReportMetric(costs[len(costs)/2], "cost-median-%")
	b.ReportMetric(100*(1-cBare.Seconds()/cCounted.Seconds()), "cpu-cost-%")
	b.Logf("per-round wall-time costs in %%: %.1f", costs)
}

// BenchmarkScrape is one GET /metrics of a hub's endpoint with a node and
// a link (the Go and process collectors included): what each scrape
// costs the process, to scale to a scrape interval.
func BenchmarkScrape(b *testing.B) {
	key, err := identity.NewKey()
	if err != nil {
		b.Fatal(err)
	}
	creds, err := pki.NewCredentials(key)
	if err != nil {
		b.Fatal(err)
	}
	h, err := hubserver.New(hubserver.Config{Name: "scraped", Creds: creds, Listen: "127.0.0.1:0", Logf: func(string, ...any) {}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Serve(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	n, err := vconn.Start(context.Background(), vconn.Config{Name: "scraped-node", ListenAddr: "127.0.0.1", Hubs: []string{h.Addr().String()}})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	for _, col := range []prometheus.Collector{hubMetrics(h), nodeMetrics(n)} {
		s, err := metrics.Listen("127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		if err := s.Serve(col); err != nil {
			b.Fatal(err)
		}
		url := "http://" + s.Addr().String() + "/metrics"
		name := "hub"
		if _, ok := col.(*metrics.Node); ok {
			name = "node"
		}
		b.Run(name, func(b *testing.B) {
			cpu0 := cpuTime(b)
			for range b.N {
				resp, err := http.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N)/1e3, "cpu-µs/scrape")
		})
	}
}
