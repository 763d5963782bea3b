package hubserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki"
)

func quiet(string, ...any) {}

// benchHubs starts n hubs in a line on loopback, without logs.
func benchHubs(b *testing.B, n int) []*Hub {
	b.Helper()
	var hubs []*Hub
	for i := range n {
		var peers []string
		if i > 0 {
			peers = []string{hubs[i-1].Addr().String()}
		}
		h, err := New(Config{Name: fmt.Sprintf("h%d", i), Creds: creds(b), Listen: "127.0.0.1:0", Peers: peers, Logf: quiet})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { h.Serve(ctx); close(done) }()
		b.Cleanup(func() { cancel(); <-done })
		hubs = append(hubs, h)
	}
	if n > 1 {
		last := hubs[n-1]
		testwait.Until(b, "the hubs to converge", 10*time.Second, func() bool {
			for _, r := range hubs[0].Routes() {
				if r.Hub == last.ID() && r.Reachable() {
					return true
				}
			}
			return false
		})
	}
	return hubs
}

func benchNode(b *testing.B, name string, h *Hub) (*hub.Session, *pki.Credentials) {
	b.Helper()
	cr := creds(b)
	s, err := hub.Attach(context.Background(), hub.SessionConfig{Creds: cr, Machine: identity.Machine{Name: name}, Hubs: []string{h.Addr().String()}, Logf: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, cr
}

// routedTLS connects from node src to node dst through the hubs, with an
// end-to-end TLS session on top of the circuit (as vconn does); serve runs
// dst's end.
func routedTLS(b *testing.B, src, dst *hub.Session, srcCreds, dstCreds *pki.Credentials, serve func(net.Conn)) net.Conn {
	b.Helper()
	go func() {
		in, ok := <-dst.Incoming()
		if !ok {
			return
		}
		in.Accept()
		tc, err := dstCreds.Server(context.Background(), in.Circuit, nil)
		if err != nil {
			return
		}
		serve(tc)
	}()
	cir, err := src.Open(context.Background(), dst.Machine(), 443)
	if err != nil {
		b.Fatal(err)
	}
	tc, err := srcCreds.Client(context.Background(), cir, dst.Machine().ID, nil)
	if err != nil {
		b.Fatal(err)
	}
	return tc
}

// sink reads size bytes per round and acknowledges each round with a byte.
func sink(size int64) func(net.Conn) {
	return func(c net.Conn) {
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
}

// pushRound sends size bytes and waits for the acknowledgement.
func pushRound(c net.Conn, buf []byte, size int64) error {
	for sent := int64(0); sent < size; {
		n, err := c.Write(buf[:min(int64(len(buf)), size-sent)])
		if err != nil {
			return err
		}
		sent += int64(n)
	}
	_, err := io.ReadFull(c, make([]byte, 1))
	return err
}

func plainTCP(b *testing.B, serve func(net.Conn)) net.Conn {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err == nil {
			serve(c)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkRoutedThroughput streams through one hub, end-to-end TLS on top
// of the circuit (the hub links are TLS too), against plain loopback TCP
// measured in the same run: alternating rounds, so that both see the same
// machine. Reported: MB/s of each, the ratio of the totals and the median
// of the ratios of neighbouring rounds.
func BenchmarkRoutedThroughput(b *testing.B) {
	const size, rounds = 128 << 20, 4
	hubs := benchHubs(b, 1)
	n1, c1 := benchNode(b, "n1", hubs[0])
	n2, c2 := benchNode(b, "n2", hubs[0])
	routed := routedTLS(b, n1, n2, c1, c2, sink(size))
	plain := plainTCP(b, sink(size))
	buf := make([]byte, 256<<10)
	// Warm up both (window auto-tuning, TCP slow start).
	for range 2 {
		if err := pushRound(routed, buf, size); err != nil {
			b.Fatal(err)
		}
		if err := pushRound(plain, buf, size); err != nil {
			b.Fatal(err)
		}
	}
	var tRouted, tPlain time.Duration
	var ratios []float64
	b.SetBytes(size * rounds)
	b.ResetTimer()
	for range b.N {
		for range rounds {
			start := time.Now()
			if err := pushRound(plain, buf, size); err != nil {
				b.Fatal(err)
			}
			p := time.Since(start)
			start = time.Now()
			if err := pushRound(routed, buf, size); err != nil {
				b.Fatal(err)
			}
			r := time.Since(start)
			tPlain += p
			tRouted += r
			ratios = append(ratios, p.Seconds()/r.Seconds())
		}
	}
	b.StopTimer()
	sort.Float64s(ratios)
	mbps := func(d time.Duration) float64 { return float64(size) * float64(rounds*b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(tPlain), "plain-MB/s")
	b.ReportMetric(mbps(tRouted), "routed-tls-MB/s")
	b.ReportMetric(mbps(tRouted)/mbps(tPlain), "ratio")
	b.ReportMetric(ratios[len(ratios)/2], "ratio-median")
}

// echoConn echoes single bytes.
func echoConn(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 1)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

func pingPong(b *testing.B, c net.Conn, rounds int) time.Duration {
	buf := make([]byte, 1)
	start := time.Now()
	for range rounds {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start) / time.Duration(rounds)
}

// BenchmarkHopLatency measures the round trip of one byte over TLS through
// 0 hubs (TLS over loopback TCP), 1 and 2 hubs, and reports what each hub
// adds.
func BenchmarkHopLatency(b *testing.B) {
	const rounds = 2000
	// 0 hubs: TLS straight over loopback TCP.
	sc, cc := creds(b), creds(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		tc, err := sc.Server(context.Background(), c, nil)
		if err == nil {
			echoConn(tc)
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	direct, err := cc.Client(context.Background(), raw, sc.Key.ID(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()

	one := benchHubs(b, 1)
	a1, ca1 := benchNode(b, "a1", one[0])
	b1, cb1 := benchNode(b, "b1", one[0])
	via1 := routedTLS(b, a1, b1, ca1, cb1, echoConn)
	two := benchHubs(b, 2)
	a2, ca2 := benchNode(b, "a2", two[0])
	b2, cb2 := benchNode(b, "b2", two[1])
	via2 := routedTLS(b, a2, b2, ca2, cb2, echoConn)

	for _, c := range []net.Conn{direct, via1, via2} {
		pingPong(b, c, 200) // warm up
	}
	var r0, r1, r2 time.Duration
	b.ResetTimer()
	for range b.N {
		r0 += pingPong(b, direct, rounds)
		r1 += pingPong(b, via1, rounds)
		r2 += pingPong(b, via2, rounds)
	}
	b.StopTimer()
	n := time.Duration(b.N)
	r0, r1, r2 = r0/n, r1/n, r2/n
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(r0), "µs-rtt-0hubs")
	b.ReportMetric(us(r1), "µs-rtt-1hub")
	b.ReportMetric(us(r2), "µs-rtt-2hubs")
	b.ReportMetric(us(r1-r0), "µs-added-1hub")
	b.ReportMetric(us(r2-r0)/2, "µs-added-per-hub-2hubs")
}

// helperHub starts a hub alone in a child process (the test binary
// re-executed: runHelper), ended when b ends, and returns its address, its
// process and a function that sends it a line (runHelper's "stats",
// "heapprofile PATH") and returns its answer.
func helperHub(b *testing.B) (string, *exec.Cmd, func(line string) string) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	out := bufio.NewScanner(stdout)
	if !out.Scan() {
		b.Fatal("helper hub said nothing")
	}
	addr := strings.TrimPrefix(out.Text(), "addr ")
	ask := func(line string) string {
		fmt.Fprintln(stdin, line)
		if !out.Scan() {
			b.Fatal("helper hub died")
		}
		return out.Text()
	}
	return addr, cmd, ask
}

// helperStats parses the helper hub's answer to "stats".
func helperStats(answer string) map[string]int64 {
	m := map[string]int64{}
	for _, kv := range strings.Fields(answer) {
		k, v, _ := strings.Cut(kv, "=")
		m[k], _ = strconv.ParseInt(v, 10, 64)
	}
	return m
}

// BenchmarkHubRSS attaches 10,000 idle nodes (GRIDLINK_RSS_NODES to
// change) from this process to a hub running alone in a child process (the
// test binary re-executed) and reports the hub's resident memory, and its
// live heap and goroutine stacks per node after a GC. With
// GRIDLINK_RSS_HEAPPROFILE=PATH the hub writes a heap profile there.
func BenchmarkHubRSS(b *testing.B) {
	nodes := 10000
	if v, err := strconv.Atoi(os.Getenv("GRIDLINK_RSS_NODES")); err == nil && v > 0 {
		nodes = v
	}
	addr, _, ask := helperHub(b)
	stats := func() map[string]int64 { return helperStats(ask("stats")) }
	before := stats()
	start := time.Now()
	sessions := make([]*hub.Session, nodes)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= nodes {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				s, err := hub.Attach(ctx, hub.SessionConfig{Creds: creds(b), Machine: identity.Machine{Name: fmt.Sprintf("n%d", i)}, Hubs: []string{addr}, Logf: quiet})
				cancel()
				if err != nil {
					failed.Store(err)
					return
				}
				sessions[i] = s
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, s := range sessions {
			if s != nil {
				s.Close()
			}
		}
	}()
	if err := failed.Load(); err != nil {
		b.Fatalf("attach: %v", err)
	}
	attachTime := time.Since(start)
	time.Sleep(3 * time.Second) // idle: pings come and go (a benchmark measuring real RSS: real time)
	after := stats()
	if after["nodes"] != int64(nodes) {
		b.Fatalf("hub lists %d nodes, want %d", after["nodes"], nodes)
	}
	if path := os.Getenv("GRIDLINK_RSS_HEAPPROFILE"); path != "" {
		ask("heapprofile " + path)
	}
	growth := float64(after["rss_kib"]-before["rss_kib"]) / 1024
	b.ReportMetric(float64(after["rss_kib"])/1024, "MiB-rss")
	b.ReportMetric(growth, "MiB-rss-growth")
	b.ReportMetric(growth*1024/float64(nodes), "KiB/node")
	b.ReportMetric(float64(after["heap"])/float64(1<<20), "MiB-heap")
	b.ReportMetric(float64(after["heap"]-before["heap"])/1024/float64(nodes), "KiB-heap/node")
	b.ReportMetric(float64(after["stack"]-before["stack"])/1024/float64(nodes), "KiB-stack/node")
	b.ReportMetric(float64(after["goroutines"]), "goroutines")
	b.ReportMetric(attachTime.Seconds(), "s-attach")
}
