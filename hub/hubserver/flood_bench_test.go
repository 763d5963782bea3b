package hubserver

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
)

// BenchmarkFloodAttach: how long a legitimate node's attach takes while
// the hub is flooded with unauthenticated connections (issue 32 item 6),
// against the same hub idle, in the same run. The hub is the gridlink
// binary in its own process (floodHub); each round times attaches to it
// idle, then during a flood of GRIDLINK_FLOOD_CONNS connections (20,000)
// from floodProcs flooders, each connection redialled at most every
// GRIDLINK_FLOOD_REDIAL (4 s: about 5,000 new connections a second),
// GRIDLINK_FLOOD_ATTACHES attaches a phase (40) one after the other,
// GRIDLINK_FLOOD_ROUNDS rounds (3). It logs a row per phase (attach
// p50/p99/max, attaches whose TCP connect took over 900 ms: a SYN the
// hub's full accept queue dropped, resent after 1 s; the hub's CPU time,
// the flood's rate, the hub's CPU time per flood connection, the
// kernel's listen overflows, the hub's RSS and descriptors) and reports
// the pooled percentiles. It ignores b.N: run
// it with -benchtime 1x (bench/flood.sh ATTACH=1).
func BenchmarkFloodAttach(b *testing.B) {
	total := envInt(b, "GRIDLINK_FLOOD_CONNS", 20000)
	rounds := envInt(b, "GRIDLINK_FLOOD_ROUNDS", 3)
	n := envInt(b, "GRIDLINK_FLOOD_ATTACHES", 40)
	redial := envDuration(b, "GRIDLINK_FLOOD_REDIAL", 4*time.Second)
	hubCmd, addr, _ := floodHub(b)
	pid := hubCmd.Process.Pid
	_, fds0 := procStatus(pid)
	b.Logf("flood of %d connections, each redialled at most every %v; %d attaches a phase, %d rounds; %d CPUs, load %s",
		total, redial, n, rounds, runtime.NumCPU(), loadAvg())
	b.Logf("| round | phase | attach p50 ms | p99 ms | max ms | connects over 900 ms | hub CPU s | new conns/s | hub CPU µs a conn | listen overflows | hub RSS max KiB | hub fds max |")
	b.Logf("|---|---|---|---|---|---|---|---|---|---|---|---|")
	var idle, flooded []time.Duration
	for r := 1; r <= rounds; r++ {
		ph := runPhase(b, addr, pid, n, nil)
		idle = append(idle, ph.times...)
		b.Logf("| %d | idle | %s |", r, ph)

		fl := startFlood(b, addr, total, redial, 10*time.Second+time.Duration(n)*time.Second)
		rampStart := time.Now()
		for fl.opened() < int64(total) && time.Since(rampStart) < 10*time.Second {
			time.Sleep(100 * time.Millisecond) // a measurement on real sockets, not a condition
		}
		ph = runPhase(b, addr, pid, n, fl)
		fl.stop()
		flooded = append(flooded, ph.times...)
		b.Logf("| %d | flood | %s |", r, ph)
		// Let the hub shed what the flood left before the next idle phase.
		for settle := time.Now(); time.Since(settle) < 10*time.Second; time.Sleep(100 * time.Millisecond) {
			if _, fds := procStatus(pid); fds <= fds0+8 {
				break
			}
		}
	}
	pi, pf := percentile(idle, 0.99), percentile(flooded, 0.99)
	b.Logf("pooled: idle p50 %v p99 %v max %v; flood p50 %v p99 %v max %v; flood p99 / idle p99 %.1f",
		msec(percentile(idle, 0.5)), msec(pi), msec(slices.Max(idle)), msec(percentile(flooded, 0.5)), msec(pf), msec(slices.Max(flooded)), float64(pf)/float64(max(pi, time.Microsecond)))
	b.ReportMetric(float64(percentile(idle, 0.5).Microseconds())/1e3, "idle-p50-ms")
	b.ReportMetric(float64(pi.Microseconds())/1e3, "idle-p99-ms")
	b.ReportMetric(float64(percentile(flooded, 0.5).Microseconds())/1e3, "flood-p50-ms")
	b.ReportMetric(float64(pf.Microseconds())/1e3, "flood-p99-ms")
	b.ReportMetric(float64(slices.Max(flooded).Microseconds())/1e3, "flood-max-ms")
}

// phase is what one phase of BenchmarkFloodAttach measured.
type phase struct {
	times     []time.Duration // each attach (a failed one counts as its limit)
	slowSYN   int             // attaches whose TCP connect took over 900 ms
	hubCPU    time.Duration
	rate      float64       // new flood connections a second
	perConn   time.Duration // the hub's CPU time per new flood connection
	overflows int64         // the kernel's ListenOverflows
	rss       int64         // KiB
	fds       int
}

func (p phase) String() string {
	return fmt.Sprintf("%s | %s | %s | %d | %.2f | %.0f | %.1f | %d | %d | %d",
		msec(percentile(p.times, 0.5)), msec(percentile(p.times, 0.99)), msec(slices.Max(p.times)), p.slowSYN,
		p.hubCPU.Seconds(), p.rate, float64(p.perConn.Nanoseconds())/1e3, p.overflows, p.rss, p.fds)
}

// runPhase times n attaches to the hub at addr (process pid), one after
// the other, 100 ms apart; fl is the flood under way, or nil.
func runPhase(b *testing.B, addr string, pid, n int, fl *flood) phase {
	var p phase
	cpu0, over0, start := procCPU(b, pid), listenOverflows(), time.Now()
	var opened0 int64
	if fl != nil {
		opened0 = fl.opened()
	}
	for i := range n {
		at, err := attachTimed(b, addr, fmt.Sprintf("n%d", i), 5*time.Second)
		if err != nil {
			b.Logf("attach %d: %v (after %v)", i, err, at.total)
			at.total = max(at.total, 5*time.Second)
		}
		if at.connect > 900*time.Millisecond {
			p.slowSYN++
		}
		if at.total > 500*time.Millisecond {
			b.Logf("slow attach: %v (TCP connect %v, first byte from the hub %v after it) %q", msec(at.total), msec(at.connect), msec(at.firstByte), at.log)
		}
		p.times = append(p.times, at.total)
		rss, fds := procStatus(pid)
		p.rss, p.fds = max(p.rss, rss), max(p.fds, fds)
		time.Sleep(100 * time.Millisecond) // attaches spread over the phase (real sockets, real time)
	}
	p.hubCPU = procCPU(b, pid) - cpu0
	p.overflows = listenOverflows() - over0
	if fl != nil {
		opened := fl.opened() - opened0
		p.rate = float64(opened) / time.Since(start).Seconds()
		p.perConn = p.hubCPU / time.Duration(max(opened, 1))
	}
	return p
}

// attachTiming is one attach, timed: its TCP connect, the hub's first
// byte after it (its TLS ServerHello: the wait in the hub's accept queue
// and for its handshake), and the whole attach.
type attachTiming struct {
	connect, firstByte, total time.Duration
	log                       []string // the session's lines
}

// attachTimed attaches a fresh node to the hub at addr within limit.
func attachTimed(b testing.TB, addr, name string, limit time.Duration) (attachTiming, error) {
	cr := creds(b)
	var at attachTiming
	var mu sync.Mutex
	dial := func(ctx context.Context, spec string) (net.Conn, error) {
		t0 := time.Now()
		c, err := hub.DialTCP(ctx, spec)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		at.connect = time.Since(t0)
		mu.Unlock()
		return &firstByteConn{Conn: c, since: time.Now(), done: func(d time.Duration) { mu.Lock(); at.firstByte = d; mu.Unlock() }}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	start := time.Now()
	s, err := hub.Attach(ctx, hub.SessionConfig{Creds: cr, Machine: identity.Machine{Name: name}, Hubs: []string{addr}, Dial: dial, Logf: func(f string, args ...any) {
		mu.Lock()
		at.log = append(at.log, fmt.Sprintf(f, args...))
		mu.Unlock()
	}})
	took := time.Since(start)
	if err == nil {
		s.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	at.total = took
	return at, err
}

// firstByteConn reports how long after since its first byte came.
type firstByteConn struct {
	net.Conn
	since time.Time
	once  sync.Once
	done  func(time.Duration)
}

func (c *firstByteConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.once.Do(func() { c.done(time.Since(c.since)) })
	}
	return n, err
}

// percentile is the nearest-rank q-quantile of ds.
func percentile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// msec is d in milliseconds, to 0.1.
func msec(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1e3, 'f', 1, 64)
}

// envDuration is the duration the environment variable name gives, or
// def.
func envDuration(t testing.TB, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q", name, v)
	}
	return d
}

// envInt is the positive number the environment variable name gives, or
// def.
func envInt(b testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q", name, v)
	}
	return n
}

// listenOverflows is the kernel's count of connections dropped because a
// listener's accept queue was full (TcpExt ListenOverflows, this network
// namespace).
func listenOverflows() int64 {
	raw, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return 0
	}
	lines := strings.Split(string(raw), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		names, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "TcpExt:" || len(vals) != len(names) {
			continue
		}
		for j, nm := range names {
			if nm == "ListenOverflows" {
				v, _ := strconv.ParseInt(vals[j], 10, 64)
				return v
			}
		}
	}
	return 0
}

func loadAvg() string {
	raw, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
