package wan

// Integration tests: real namespaces, TUN devices and traffic. They need
// root; they skip without it, or fail under CI=true. Tolerances are wide
// enough for a loaded two-core machine (and the race detector); the tight
// figures are the benchmarks' job.

import (
	"math"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// checkRTT asserts that probes saw 2×oneWay: none faster than that
// minus 0.5 ms, the median no more than 3 ms slower.
func checkRTT(t *testing.T, what string, rtts []time.Duration, lost int, oneWay time.Duration) {
	t.Helper()
	if len(rtts) == 0 || lost > len(rtts)/10 {
		t.Fatalf("%s: %d replies, %d lost", what, len(rtts), lost)
	}
	lo, hi := 2*oneWay-500*time.Microsecond, 2*oneWay+3*time.Millisecond
	minRTT, med := slices.Min(rtts), median(rtts)
	if minRTT < lo || med > hi {
		t.Errorf("%s: RTT min %v median %v, want within [%v, %v]", what, minRTT, med, lo, hi)
	}
	t.Logf("%s: RTT min %v median %v max %v (%d probes, %d lost)", what, minRTT, med, slices.Max(rtts), len(rtts), lost)
}

func pipeStats(t *testing.T, e *Emulator, from, to string) PipeStats {
	t.Helper()
	for _, s := range e.Stats() {
		if s.From == from && s.To == to {
			return s
		}
	}
	t.Fatalf("no pipe %s->%s in %v", from, to, e.Stats())
	return PipeStats{}
}

func TestEmulatorDelayPerPair(t *testing.T) {
	requireNetAdmin(t)
	a := newSite(t, "a", "198.51.100.1")
	b := newSite(t, "b", "198.51.100.2")
	c := newSite(t, "c", "198.51.100.3")
	e := startEmulator(t, []Link{
		{A: "a", B: "b", Delay: 5 * time.Millisecond},
		{A: Any, B: Any, Delay: 15 * time.Millisecond},
	}, a, b, c)

	rtts, lost := pingRTTs(t, a, b, 7, 40, 10*time.Millisecond)
	checkRTT(t, "a<->b (5 ms)", rtts, lost, 5*time.Millisecond)
	rtts, lost = pingRTTs(t, a, c, 7, 20, 10*time.Millisecond)
	checkRTT(t, "a<->c (default 15 ms)", rtts, lost, 15*time.Millisecond)

	if s := pipeStats(t, e, "a", "b"); s.Packets < 40 || s.LossDrops+s.QueueDrops > 0 {
		t.Errorf("a->b: %v", s)
	}
	if s := pipeStats(t, e, "c", "a"); s.Packets < 20 {
		t.Errorf("c->a: %v", s)
	}
	if s := pipeStats(t, e, "b", "c"); s.Packets != 0 {
		t.Errorf("b->c carried traffic nobody sent: %v", s)
	}
}

func TestEmulatorRate(t *testing.T) {
	requireNetAdmin(t)
	const rate = 20e6
	a := newSite(t, "a", "198.51.100.1")
	b := newSite(t, "b", "198.51.100.2")
	e := startEmulator(t, []Link{{A: Any, B: Any, Delay: 5 * time.Millisecond, Rate: rate}}, a, b)

	start := time.Now()
	got := tcpGoodput(t, a, b, 5*time.Second, 0)
	elapsed := time.Since(start)
	// Rate counts IP bytes; 1500-byte packets carry 1448 bytes of TCP
	// payload (20 IP + 32 TCP with timestamps).
	want := rate * 1448 / 1500
	t.Logf("goodput %.2f Mbit/s, expected %.2f; %v", got/1e6, want/1e6, pipeStats(t, e, "a", "b"))
	// The lower bound leaves room for a stalled host (a few hundred ms
	// without CPU costs TCP a timeout); the upper one is the link's.
	if got < 0.75*want || got > 1.03*want {
		t.Errorf("goodput %.2f Mbit/s, want %.2f Mbit/s -25%%/+3%%", got/1e6, want/1e6)
	}
	// What the pipe let through can never beat the rate.
	s := pipeStats(t, e, "a", "b")
	if bps := float64(s.Bytes) * 8 / elapsed.Seconds(); bps > rate*1.01 {
		t.Errorf("pipe forwarded %.2f Mbit/s over a %.0f Mbit/s link", bps/1e6, rate/1e6)
	}
	if s.Batches != 0 {
		t.Errorf("GSO batches passed a rate-limited pipe intact: %v", s)
	}
}

func TestEmulatorLoss(t *testing.T) {
	requireNetAdmin(t)
	const probes = 400
	a := newSite(t, "a", "198.51.100.1")
	b := newSite(t, "b", "198.51.100.2")
	c := newSite(t, "c", "198.51.100.3")
	e := startEmulator(t, []Link{
		{A: "a", B: "b", Delay: time.Millisecond, Loss: 0.1},
		{A: "a", B: "c", Delay: time.Millisecond, Loss: 0.01},
	}, a, b, c)

	// UDP probes: a probe survives both directions with (1-loss)^2.
	rtts, lost := pingRTTs(t, a, b, 7, probes, 3*time.Millisecond)
	within5sd(t, "round-trip probe loss", lost, probes, 1-0.9*0.9)
	if len(rtts)+lost != probes {
		t.Errorf("%d replies + %d lost != %d probes", len(rtts), lost, probes)
	}
	s := pipeStats(t, e, "a", "b")
	within5sd(t, "a->b probe loss", int(s.LossDrops), probes, 0.1)

	// TCP through a lossy link: batches must be cut into segments and
	// each segment lost on its own.
	tcpGoodput(t, a, c, 3*time.Second, 0)
	s = pipeStats(t, e, "a", "c")
	t.Logf("a->c after TCP: %v", s)
	if s.Batches != 0 {
		t.Errorf("GSO batches passed a lossy pipe intact: %v", s)
	}
	if s.Packets < 1000 {
		t.Fatalf("TCP moved only %d packets through a lossy link", s.Packets)
	}
	within5sd(t, "a->c per-packet loss", int(s.LossDrops), int(s.Packets+s.LossDrops), 0.01)
}

// within5sd asserts that k of n Bernoulli(p) trials is within five standard
// deviations of the mean.
func within5sd(t *testing.T, what string, k, n int, p float64) {
	t.Helper()
	mean, sd := float64(n)*p, math.Sqrt(float64(n)*p*(1-p))
	t.Logf("%s: %d of %d (%.2f%%), expected %.0f ± %.1f", what, k, n, 100*float64(k)/float64(n), mean, sd)
	if math.Abs(float64(k)-mean) > 5*sd {
		t.Errorf("%s: %d of %d, want %.0f ± %.0f", what, k, n, mean, 5*sd)
	}
}

func TestEmulatorOffloadPassThrough(t *testing.T) {
	requireNetAdmin(t)
	a := newSite(t, "a", "198.51.100.1")
	b := newSite(t, "b", "198.51.100.2")
	e := startEmulator(t, nil, a, b)
	got := tcpGoodput(t, a, b, 3*time.Second, 0)
	s := pipeStats(t, e, "a", "b")
	t.Logf("goodput %.0f Mbit/s; %v", got/1e6, s)
	if s.Batches == 0 {
		t.Errorf("no GSO batch passed the unlimited pipe: offloads not in use")
	}
	if got < 50e6 {
		t.Errorf("goodput %.0f Mbit/s over an unlimited link", got/1e6)
	}
}

func TestEmulatorUnroutableAndLooped(t *testing.T) {
	requireNetAdmin(t)
	a := newSite(t, "a", "198.51.100.1")
	b := newSite(t, "b", "198.51.100.2")
	pa := a.port()
	pa.Prefixes = append(pa.Prefixes, netip.MustParsePrefix("203.0.113.0/24"))
	e, err := Start(Config{Ports: []Port{pa, b.port()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })

	for _, dst := range []string{"198.51.100.99:9", "203.0.113.5:9"} {
		startHelper(t, a, "udpsend", dst, "5").result(t)
	}
	ps := e.PortStats()[0]
	t.Logf("port a: %+v", ps)
	if ps.Unroutable < 5 || ps.Looped < 5 || ps.Err != nil {
		t.Errorf("port a: %+v, want at least 5 unroutable and 5 looped", ps)
	}
	if s := pipeStats(t, e, "a", "b"); s.Packets != 0 {
		t.Errorf("a->b carried misrouted packets: %v", s)
	}
}

func TestStartErrors(t *testing.T) {
	requireNetAdmin(t)
	a := newSite(t, "a", "198.51.100.1")
	b := newSite(t, "b", "198.51.100.2")

	missingNS := a.port()
	missingNS.Name, missingNS.NetNS = "ghost", "/run/netns/"+nsPrefix+"no-such-namespace"
	missingNS.Prefixes = []netip.Prefix{netip.MustParsePrefix("198.51.100.200/32")}
	missingDev := b.port()
	missingDev.Dev = "wan9"
	for _, tc := range []struct {
		ports []Port
		want  string
	}{
		{[]Port{a.port(), missingNS}, `wan: port "ghost": open tun wan0 in /run/netns/` + nsPrefix + `no-such-namespace: open namespace`},
		{[]Port{a.port(), missingDev}, `wan: port "b": open tun wan9 in ` + b.path() + `: no such device`},
	} {
		e, err := Start(Config{Ports: tc.ports})
		if err == nil {
			e.Close()
			t.Errorf("Start succeeded, want error %q", tc.want)
		} else if !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Start error %q, want prefix %q", err, tc.want)
		}
	}
	// The failed Starts must have let go of a's device: an emulator can
	// attach, and a second one cannot while the first holds it.
	e := startEmulator(t, nil, a, b)
	if e2, err := Start(Config{Ports: []Port{a.port(), b.port()}}); err == nil {
		e2.Close()
		t.Error("second emulator attached to devices already held")
	} else if !strings.Contains(err.Error(), "another process holds the device") {
		t.Errorf("second emulator: %v", err)
	}
	// Close detaches and leaves the devices in place for the next one.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "-n", a.ns, "link", "show", "wan0").CombinedOutput(); err != nil {
		t.Fatalf("wan0 gone after Close: %v %s", err, out)
	}
	startEmulator(t, []Link{{A: Any, B: Any, Delay: 2 * time.Millisecond}}, a, b)
	rtts, lost := pingRTTs(t, a, b, 7, 10, 5*time.Millisecond)
	checkRTT(t, "after restart", rtts, lost, 2*time.Millisecond)
}

func TestCloseIsPrompt(t *testing.T) {
	requireNetAdmin(t)
	a := newSite(t, "a", "198.51.100.1")
	b := newSite(t, "b", "198.51.100.2")
	// A long delay keeps packets in flight when Close comes.
	e := startEmulator(t, []Link{{A: Any, B: Any, Delay: 2 * time.Second}}, a, b)
	startHelper(t, a, "udpsend", "198.51.100.2:9", "50").result(t)
	if s := pipeStats(t, e, "a", "b"); s.InFlight == 0 {
		t.Fatalf("nothing in flight: %v", s)
	}
	start := time.Now()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := e.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if s := pipeStats(t, e, "a", "b"); s.InFlight != 0 || s.Packets != 0 {
		t.Errorf("after Close: %v, want nothing delivered or held", s)
	}
}
