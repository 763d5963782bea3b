package wan

// Measurements of the emulator against real traffic, reported as custom
// benchmark metrics. Each benchmark builds its namespaces, measures once
// (whatever b.N is) and tears everything down. Run as root:
//
//	go test -run '^$' -bench Emulator -benchtime 1x ./lab/wan/
//
// The traffic comes from this test binary re-executed inside the site
// namespaces (see helper_linux_test.go), so the emulator shares its process
// with nothing but the measuring harness.

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tcpGoodput sends TCP from a to b for d and returns the goodput in bit/s
// measured by the receiver after a 1 s warm-up. pacing > 0 caps the
// sender's rate with kernel pacing.
func tcpGoodput(tb testing.TB, a, b *site, d time.Duration, pacing int64) float64 {
	tb.Helper()
	return startTCP(tb, a, b, 5201, d, pacing)()
}

// startTCP starts a TCP transfer like tcpGoodput's and returns a function
// that waits for it and returns the goodput; call it on tb's goroutine.
func startTCP(tb testing.TB, a, b *site, port int, d time.Duration, pacing int64) func() float64 {
	tb.Helper()
	addr := fmt.Sprintf("%s:%d", b.addr, port)
	sink := startHelper(tb, b, "sink", addr, "1s")
	send := startHelper(tb, a, "send", addr, d.String(), strconv.FormatInt(pacing, 10))
	return func() float64 {
		tb.Helper()
		send.result(tb)
		res := sink.result(tb)
		var bps float64
		var bytes int64
		if _, err := fmt.Sscanf(res, "bps=%g bytes=%d", &bps, &bytes); err != nil {
			tb.Fatalf("sink result %q: %v", res, err)
		}
		return bps
	}
}

// pingRTTs runs count UDP probes, one every interval, from a to a fresh
// echo helper on b's UDP port and returns the round-trip times and the
// number of probes lost (no reply within a second).
func pingRTTs(tb testing.TB, a, b *site, port, count int, interval time.Duration) ([]time.Duration, int) {
	tb.Helper()
	addr := fmt.Sprintf("%s:%d", b.addr, port)
	startHelper(tb, b, "echo", addr)
	ping := startHelper(tb, a, "ping", addr, strconv.Itoa(count), interval.String(), "1s")
	res := ping.result(tb)
	rttPart, lostPart, ok := strings.Cut(res, " lost=")
	if !ok {
		tb.Fatalf("ping result %q", res)
	}
	lost, err := strconv.Atoi(lostPart)
	if err != nil {
		tb.Fatalf("ping result %q: %v", res, err)
	}
	var rtts []time.Duration
	for _, f := range strings.Split(strings.TrimPrefix(rttPart, "rtt="), ",") {
		if f == "" {
			continue
		}
		ns, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			tb.Fatalf("ping result %q: %v", res, err)
		}
		rtts = append(rtts, time.Duration(ns))
	}
	return rtts, lost
}

// delayErrors returns the mean and 99th percentile of |rtt/2 - oneWay|.
func delayErrors(rtts []time.Duration, oneWay time.Duration) (mean, p99 time.Duration) {
	if len(rtts) == 0 {
		return 0, 0
	}
	errs := make([]time.Duration, len(rtts))
	var sum time.Duration
	for i, r := range rtts {
		e := r/2 - oneWay
		if e < 0 {
			e = -e
		}
		errs[i] = e
		sum += e
	}
	slices.Sort(errs)
	return sum / time.Duration(len(errs)), errs[min(len(errs)-1, int(math.Ceil(0.99*float64(len(errs))))-1)]
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// BenchmarkEmulatorThroughput compares TCP goodput through the emulator
// (one unlimited, zero-delay link), with offloads (the default) and
// without, against a plain veth pair between two namespaces measured in
// the same run; cpu is the emulator process's CPU use in % of one core.
// It also reports the goodput over a 10 ms link (20 ms RTT), where a
// single flow is bounded by the hosts' TCP windows rather than by the
// emulator.
func BenchmarkEmulatorThroughput(b *testing.B) {
	requireNetAdmin(b)
	const d = 8 * time.Second
	x, y := newSite(b, "vx", "198.51.100.1"), newSite(b, "vy", "198.51.100.2")
	vethPair(b, x, y)
	veth := tcpGoodput(b, x, y, d, 0)
	b.ReportMetric(veth/1e6, "veth-Mbit/s")
	for _, tc := range []struct {
		name    string
		cfg     Config
		compare bool
	}{
		{"offload", Config{}, true},
		{"nooffload", Config{NoOffload: true}, true},
		{"offload-rtt20ms", Config{Links: []Link{{A: Any, B: Any, Delay: 10 * time.Millisecond}}}, false},
		{"nooffload-rtt20ms", Config{Links: []Link{{A: Any, B: Any, Delay: 10 * time.Millisecond}}, NoOffload: true}, false},
	} {
		x, y := newSite(b, "t"+tc.name+"x", "198.51.100.1"), newSite(b, "t"+tc.name+"y", "198.51.100.2")
		tc.cfg.Ports = []Port{x.port(), y.port()}
		e, err := Start(tc.cfg)
		if err != nil {
			b.Fatal(err)
		}
		cpu := cpuMeter()
		emu := tcpGoodput(b, x, y, d, 0)
		b.ReportMetric(cpu(), tc.name+"-cpu-%")
		e.Close()
		b.ReportMetric(emu/1e6, tc.name+"-Mbit/s")
		if tc.compare {
			b.ReportMetric(emu/veth, tc.name+"-vs-veth")
		}
		txDrops, _ := x.devDrops(b)
		b.Logf("%s: emulator %.0f Mbit/s, veth %.0f Mbit/s, sender's wan0 dropped %d; %v", tc.name, emu/1e6, veth/1e6, txDrops, e.Stats())
	}
}

// BenchmarkEmulatorDelay measures how well a 10 ms one-way link keeps its
// delay: UDP ping-pong every 10 ms, idle and while a kernel-paced
// 100 Mbit/s TCP flow runs in the same direction, with and without
// Config.CPULatencyQoS.
//
// err is |rtt/2 - 10 ms|: everything the probes see, the hosts' own stacks
// and wake-ups included. base-rtt is the median RTT of the same probes
// over a zero-delay emulated link; adj-err subtracts half of it, leaving
// what the emulator adds to or takes from the configured delay.
// release-err is the emulator's own measure (PipeStats.ReleaseErrMean),
// cpu the emulator process's CPU use (% of one core) while loaded, steal
// the hypervisor's steal time over the whole measurement.
func BenchmarkEmulatorDelay(b *testing.B) {
	requireNetAdmin(b)
	for _, qos := range []bool{false, true} {
		b.Run(fmt.Sprintf("qos=%v", qos), func(b *testing.B) { measureDelay(b, qos) })
	}
}

func measureDelay(b *testing.B, qos bool) {
	const (
		oneWay = 10 * time.Millisecond
		probes = 500
		every  = 10 * time.Millisecond
	)
	steal := stealMeter(b)
	tag := "n"
	if qos {
		tag = "q"
	}
	newPair := func(links []Link, name string) (*site, *site, *Emulator) {
		x := newSite(b, "d"+tag+name+"x", "198.51.100.1")
		y := newSite(b, "d"+tag+name+"y", "198.51.100.2")
		cfg := Config{Ports: []Port{x.port(), y.port()}, Links: links, Seed: 1, CPULatencyQoS: qos}
		e, err := Start(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { e.Close() })
		return x, y, e
	}
	delayed := []Link{{A: Any, B: Any, Delay: oneWay}}

	x, y, _ := newPair(nil, "0")
	base, _ := pingRTTs(b, x, y, 7, probes/5, every)
	slices.Sort(base)
	baseRTT := base[len(base)/2]
	b.ReportMetric(us(baseRTT), "base-rtt-us")

	report := func(phase string, e *Emulator, rtts []time.Duration, lost int) {
		mean, p99 := delayErrors(rtts, oneWay)
		adjMean, adjP99 := delayErrors(rtts, oneWay+baseRTT/2)
		b.ReportMetric(us(mean), phase+"-err-mean-us")
		b.ReportMetric(us(p99), phase+"-err-p99-us")
		b.ReportMetric(us(adjMean), phase+"-adj-err-mean-us")
		b.ReportMetric(us(adjP99), phase+"-adj-err-p99-us")
		var relErr time.Duration
		for _, s := range e.Stats() {
			relErr = max(relErr, s.ReleaseErrMean)
		}
		b.ReportMetric(us(relErr), phase+"-release-err-us")
		b.Logf("%s: %d probes, %d lost, error mean %v p99 %v, adjusted mean %v p99 %v; %v",
			phase, len(rtts), lost, mean, p99, adjMean, adjP99, e.Stats())
	}

	x, y, e := newPair(delayed, "i")
	idle, lost := pingRTTs(b, x, y, 7, probes, every)
	report("idle", e, idle, lost)

	x, y, e = newPair(delayed, "l")
	wait := startTCP(b, x, y, 5201, probes*every+3*time.Second, 100e6)
	time.Sleep(1500 * time.Millisecond)
	cpu := cpuMeter()
	busy, lost := pingRTTs(b, x, y, 8, probes, every)
	b.ReportMetric(cpu(), "loaded-cpu-%")
	bps := wait()
	report("loaded", e, busy, lost)
	b.ReportMetric(bps/1e6, "load-Mbit/s")
	b.ReportMetric(steal(), "steal-%")
}

// cpuMeter returns a function that reports this process's CPU use since
// the call, in % of one core.
func cpuMeter() func() float64 {
	used := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	u0, t0 := used(), time.Now()
	return func() float64 { return float64(used()-u0) / float64(time.Since(t0)) * 100 }
}

// stealMeter returns a function that reports the hypervisor's steal time
// since the call, in % of all CPU time: how much the host took away.
func stealMeter(tb testing.TB) func() float64 {
	read := func() (steal, total float64) {
		data, err := os.ReadFile("/proc/stat")
		if err != nil {
			tb.Fatal(err)
		}
		line, _, _ := strings.Cut(string(data), "\n")
		for i, f := range strings.Fields(line)[1:] {
			v, _ := strconv.ParseFloat(f, 64)
			if i < 8 { // user nice system idle iowait irq softirq steal
				total += v
			}
			if i == 7 {
				steal = v
			}
		}
		return steal, total
	}
	s0, t0 := read()
	return func() float64 {
		s1, t1 := read()
		if t1 == t0 {
			return 0
		}
		return (s1 - s0) / (t1 - t0) * 100
	}
}

// udpThrough blasts UDP from a to b at rate bits/s for d and returns what
// the receiver counted: packets sent and received, and the IP-level rate
// at which they arrived.
func udpThrough(tb testing.TB, a, b *site, port int, rate int64, d time.Duration) (sent, got int64, bps float64) {
	tb.Helper()
	addr := fmt.Sprintf("%s:%d", b.addr, port)
	count := startHelper(tb, b, "udpcount", addr, "500ms")
	blast := startHelper(tb, a, "udpblast", addr, strconv.FormatInt(rate, 10), d.String(), "1472")
	if _, err := fmt.Sscanf(blast.result(tb), "sent=%d", &sent); err != nil {
		tb.Fatal(err)
	}
	var bytes, span int64
	res := count.result(tb)
	if _, err := fmt.Sscanf(res, "pkts=%d bytes=%d span=%d", &got, &bytes, &span); err != nil {
		tb.Fatalf("udpcount result %q: %v", res, err)
	}
	if span > 0 {
		bps = float64(bytes) * 8 / (float64(span) / 1e9)
	}
	return sent, got, bps
}

// BenchmarkEmulatorRateLoss measures rate and loss accuracy with UDP, which
// (unlike TCP) shows the link itself: a flow offered at 1.5× the link rate
// must arrive at exactly the rate (IP bytes), and a flow well below the
// rate over a lossy link must lose the configured share, within
// statistics (loss-z is the deviation in binomial standard deviations).
// TCP goodput over the rate-limited links is reported alongside, as a
// share of the most TCP can carry (payload 1448 of 1500 IP bytes).
func BenchmarkEmulatorRateLoss(b *testing.B) {
	requireNetAdmin(b)
	for _, rate := range []int64{10e6, 50e6, 200e6} {
		b.Run(fmt.Sprintf("rate=%dM", rate/1e6), func(b *testing.B) {
			x := newSite(b, fmt.Sprintf("r%dx", rate/1e6), "198.51.100.1")
			y := newSite(b, fmt.Sprintf("r%dy", rate/1e6), "198.51.100.2")
			startEmulator(b, []Link{{A: Any, B: Any, Delay: 5 * time.Millisecond, Rate: rate}}, x, y)
			_, _, bps := udpThrough(b, x, y, 9000, rate*3/2, 3*time.Second)
			b.ReportMetric(100*(bps-float64(rate))/float64(rate), "udp-rate-err-%")
			tcp := tcpGoodput(b, x, y, 6*time.Second, 0)
			b.ReportMetric(100*tcp/(float64(rate)*1448/1500), "tcp-of-max-%")
			b.Logf("rate %d Mbit/s: UDP arrived at %.3f Mbit/s, TCP goodput %.2f Mbit/s", rate/1e6, bps/1e6, tcp/1e6)
		})
	}
	for _, loss := range []float64{0.01, 0.05} {
		b.Run(fmt.Sprintf("loss=%g", loss), func(b *testing.B) {
			x := newSite(b, fmt.Sprintf("l%gx", loss*100), "198.51.100.1")
			y := newSite(b, fmt.Sprintf("l%gy", loss*100), "198.51.100.2")
			startEmulator(b, []Link{{A: Any, B: Any, Delay: 5 * time.Millisecond, Loss: loss}}, x, y)
			sent, got, _ := udpThrough(b, x, y, 9000, 20e6, 3*time.Second)
			lost := float64(sent - got)
			sd := math.Sqrt(float64(sent) * loss * (1 - loss))
			b.ReportMetric(100*lost/float64(sent), "loss-%")
			b.ReportMetric((lost-float64(sent)*loss)/sd, "loss-z")
			b.Logf("loss %g: %d of %d lost (%.3f%%)", loss, sent-got, sent, 100*lost/float64(sent))
		})
	}
}

// BenchmarkEmulatorWakeup measures how late a goroutine wakes for a
// deadline 0.2-5 ms ahead, by method: Go's time.Sleep, clock_nanosleep
// (TIMER_ABSTIME, on a locked thread), a bare timerfd through the
// runtime poller, and the pipes' sleeper (timerfd plus rationed spinning,
// which may also return a little early when its ration is spent). It is
// what chose the sleeper's design; the numbers are |lateness| mean and
// p99.
func BenchmarkEmulatorWakeup(b *testing.B) {
	const n = 400
	waits := make([]time.Duration, n)
	for i := range waits {
		waits[i] = time.Duration(200+(i*7919)%4800) * time.Microsecond
	}
	measure := func(b *testing.B, wait func(deadline int64)) {
		errs := make([]time.Duration, 0, n)
		for _, w := range waits {
			deadline := monoNow() + int64(w)
			wait(deadline)
			errs = append(errs, time.Duration(abs(monoNow()-deadline)))
		}
		slices.Sort(errs)
		var sum time.Duration
		for _, e := range errs {
			sum += e
		}
		b.ReportMetric(us(sum/n), "err-mean-us")
		b.ReportMetric(us(errs[n*99/100]), "err-p99-us")
	}
	b.Run("time.Sleep", func(b *testing.B) {
		measure(b, func(d int64) { time.Sleep(time.Duration(d - monoNow())) })
	})
	b.Run("clock_nanosleep", func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		offset := ts.Nano() - monoNow() // CLOCK_MONOTONIC minus our clock
		measure(b, func(d int64) {
			at := unix.NsecToTimespec(d + offset)
			for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &at, nil) == unix.EINTR {
			}
		})
	})
	b.Run("timerfd", func(b *testing.B) {
		s, err := newSleeper(newSpinner())
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		measure(b, func(d int64) { s.wait(d - monoNow()) })
	})
	b.Run("sleeper", func(b *testing.B) {
		s, err := newSleeper(newSpinner())
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		measure(b, func(d int64) { s.sleepUntil(d) })
	})
}
