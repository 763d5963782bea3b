package lab_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/internal/testwait"
)

// The soak (issue 23, make soak; not part of make test): grid6 with its
// overlay (a hub per site on the frontends, node agents on every site's
// matrix host and on three churn nodes, the virtual network on three of
// them) carrying steady traffic while chaos happens on a seeded schedule;
// at the end a report of what was lost or corrupted (must be nothing),
// every connection failure with its reason and the chaos on its path in its
// time (soak_attrib_linux_test.go: one with none fails the soak), and
// the slopes of each long-running process's RSS, goroutines and open
// files. Traffic (soak_traffic_linux_test.go, soak_stream_linux_test.go):
//
//   - cp: gets from g5k-n1 and puts from hiroshi-n1 (routed only) of
//     4 MiB files of random bytes to and from a transfer service at
//     das3v-n1, each compared byte for byte with its source;
//   - ping: gridlink ping loops from desktop-pc and g5k-n1 to every
//     other node agent in turn;
//   - ssh: a session from das3d-n1 to an sshd at rockstar-n1 (exposed
//     through its agent) through ProxyCommand gridlink nc, running a loop
//     that prints a counter twice a second, each line checked;
//   - vip: TCP streams over the virtual network by name (hiroshi-n1 to
//     das3d-n1.grid, das3d-n1 to g5k-n1.grid) whose bytes are a checked
//     sequence, the total confirmed by the receiver at the end.
//
// Chaos (soak_chaos_linux_test.go), one event at a time: churn nodes
// leave (SIGTERM) and join; hubs are killed (SIGKILL) and started again;
// the wide-area path of two sites flaps; a site's wide-area traffic
// loses a burst of packets; the sites split in two and heal.
//
// GRIDLINK_SOAK is the duration (e.g. 1h, 10m); GRIDLINK_SOAK_SEED the
// chaos's seed (default: the clock, printed); GRIDLINK_SOAK_REPORT a file
// for the report (Markdown) besides the test log.
func TestSoak(t *testing.T) {
	spec := os.Getenv("GRIDLINK_SOAK")
	if spec == "" {
		t.Skip("the soak runs with make soak (GRIDLINK_SOAK=DURATION)")
	}
	dur, err := time.ParseDuration(spec)
	if err != nil || dur < time.Minute {
		t.Fatalf("GRIDLINK_SOAK=%q: want a duration of a minute or more", spec)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("GRIDLINK_SOAK_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("GRIDLINK_SOAK_SEED=%q: %v", s, err)
		}
	}
	t.Logf("soak for %v, chaos seed %d (GRIDLINK_SOAK_SEED)", dur, seed)
	S := &soak{t: t, bin: gridlinkBin(t), rng: rand.New(rand.NewPCG(seed, seed^0x50a4)), seed: seed,
		stats: map[string]*opStats{}, series: map[string][]*series{}}
	S.topo = labtest.Up(t, "grid6", nil)
	// Ctrl-C (once the lab is up: before, it ends the test at once)
	// ends the soak early with its report, and the lab comes down as
	// after any test.
	sigCtx, stopSig := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSig()
	S.up(sigCtx)

	ctx, cancel := context.WithTimeout(sigCtx, dur)
	defer cancel()
	S.start = time.Now()
	var wg sync.WaitGroup
	S.traffic(ctx, &wg)
	wg.Go(func() { S.sample(ctx) })
	S.chaos(ctx, dur)
	<-ctx.Done()
	S.end = time.Now()
	wg.Wait()
	S.homes.Wait()
	S.homeAtEnd()  // soak_home_linux_test.go
	S.sampleOnce() // the last figures, after the traffic's end
	S.report()
}

// soakChurn are the hosts whose node agents leave and join.
var soakChurn = []string{"das3d-n2", "rockstar-n2", "g5k-n2"}

// soakVIP are the hosts whose node agents run the virtual network.
var soakVIP = []string{"das3d-n1", "g5k-n1", "hiroshi-n1"}

// soakStreams are the virtual-network flows, (from, to).
var soakStreams = [][2]string{{"hiroshi-n1", "das3d-n1"}, {"das3d-n1", "g5k-n1"}}

// Where the soak's processes serve their metrics (in their namespace's
// loopback).
const (
	nodeMetrics  = 9100
	hubMetrics   = 9101
	serveMetrics = 9102
)

type soak struct {
	t          *testing.T
	topo       *topology.Topology
	bin        string
	o          *matrix.Overlay
	seed       uint64
	rng        *rand.Rand // the chaos's, used by its goroutine only
	start, end time.Time

	mu       sync.Mutex
	failures []failure
	events   []chaosEvent
	paths    pathModel            // grid6's routes, as the start saw them (soak_attrib_linux_test.go)
	stalls   []stall              // of the vip streams (soak_stream_linux_test.go)
	lastByte map[string]time.Time // a vip stream's last bytes, by receiver
	stats    map[string]*opStats  // by traffic kind
	series   map[string][]*series // by process name, one per process run
	procs    []soakProc           // the processes sampled besides hubs and agents
	down     map[string]bool      // hubs ("hub SITE") and nodes down now
	// nodes back at their home hub (soak_home_linux_test.go)
	returns   []homeReturn
	away      []string // nodes not at their home hub at the end
	homeCheck time.Duration
	homes     sync.WaitGroup // watchHome

	corrupt, lost atomic.Int64 // bytes
}

// failure is one failed operation: what, on which path, why (the
// tool's words) and when it ran.
type failure struct {
	op          string
	path        opPath
	from, until time.Time
	reason      string
}

// opStats counts one kind of traffic.
type opStats struct {
	ops, ok  int
	verified int64 // bytes (or lines) checked equal
	unit     string
}

func (S *soak) host(name string) *topology.Host { return labtest.Host(S.t, S.topo, name) }

// up starts the overlay: hubs on the frontends, node agents on the
// matrix hosts and the churn hosts, all serving metrics.
func (S *soak) up(ctx context.Context) {
	t := S.t
	hosts := []*topology.Host{}
	for _, s := range S.topo.Sites {
		hosts = append(hosts, s.MatrixHost())
	}
	for _, n := range soakChurn {
		hosts = append(hosts, S.host(n))
	}
	o, err := matrix.StartOverlayWith(ctx, S.topo, S.bin, matrix.Options{
		Hosts:   hosts,
		HubArgs: func(string) []string { return []string{"--metrics", fmt.Sprintf(":%d", hubMetrics)} },
		NodeArgs: func(h *topology.Host) []string {
			args := []string{"--metrics", fmt.Sprintf(":%d", nodeMetrics)}
			for _, v := range soakVIP {
				if h.ID() == v {
					args = append(args, "--vip")
				}
			}
			return args
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Stop)
	S.o = o
	if !o.WaitStable(ctx, 3*time.Second, 60*time.Second) {
		t.Logf("the hubs' routes did not settle in 60 s; going on")
	}
	S.down = map[string]bool{}
	S.paths = S.routes(ctx)
	S.trackOverlay()
	// the virtual network's addresses are claimed once the agents
	// answer: its names resolve after that
	for _, p := range soakStreams {
		src, name := S.host(p[0]), p[1]+".grid"
		testwait.Until(t, name+" to resolve at "+p[0], 60*time.Second, func() bool {
			out, _, err := tryIn(ctx, src, nil, "getent", "ahostsv4", name)
			return err == nil && len(strings.Fields(string(out))) > 0
		})
	}
}

// fail records a failed operation on path.
func (S *soak) fail(op string, path opPath, from time.Time, reason string) {
	reason = strings.Join(strings.Fields(reason), " ") // one line, for the report's table
	if len(reason) > 400 {
		reason = reason[:400] + "..."
	}
	S.mu.Lock()
	S.failures = append(S.failures, failure{op: op, path: path, from: from, until: time.Now(), reason: reason})
	S.mu.Unlock()
	S.t.Logf("%s: %s failed: %s", S.since(time.Now()), op, reason)
}

// count records an operation of kind, done or not, and the bytes it
// verified.
func (S *soak) count(kind, unit string, ok bool, verified int64) {
	S.mu.Lock()
	defer S.mu.Unlock()
	st := S.stats[kind]
	if st == nil {
		st = &opStats{unit: unit}
		S.stats[kind] = st
	}
	st.ops++
	if ok {
		st.ok++
	}
	st.verified += verified
}

// verified adds n bytes (or lines) of kind checked equal, outside any
// one operation's count.
func (S *soak) verified(kind, unit string, n int64) {
	S.mu.Lock()
	defer S.mu.Unlock()
	st := S.stats[kind]
	if st == nil {
		st = &opStats{unit: unit}
		S.stats[kind] = st
	}
	st.verified += n
}

// since is a time as an offset into the soak ("+12m03s").
func (S *soak) since(at time.Time) string {
	return "+" + at.Sub(S.start).Round(time.Second).String()
}

// isDown says whether a chaos event has the hub or node key down now.
func (S *soak) isDown(key string) bool {
	S.mu.Lock()
	defer S.mu.Unlock()
	return S.down[key]
}

// pause waits d, or less if ctx ends; it says whether ctx goes on.
func pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// report writes what the soak found: to the test log, and to
// $GRIDLINK_SOAK_REPORT if set. The test fails if a byte was corrupted
// or lost, or a failure had no chaos event on its path in its time.
func (S *soak) report() {
	t := S.t
	var b strings.Builder
	S.mu.Lock()
	defer S.mu.Unlock()
	fmt.Fprintf(&b, "## Soak: grid6, %v (chaos seed %d)\n\n", S.end.Sub(S.start).Round(time.Second), S.seed)
	fmt.Fprintf(&b, "Bytes corrupted: %d; bytes (or ssh lines) lost: %d.\n\n", S.corrupt.Load(), S.lost.Load())
	fmt.Fprintln(&b, "| traffic | operations | succeeded | verified |")
	fmt.Fprintln(&b, "|---|---|---|---|")
	kinds := make([]string, 0, len(S.stats))
	for k := range S.stats {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		st := S.stats[k]
		v := fmt.Sprintf("%d %s", st.verified, st.unit)
		if st.unit == "bytes" {
			v = fmt.Sprintf("%.1f MiB", float64(st.verified)/(1<<20))
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s |\n", k, st.ops, st.ok, v)
	}
	byKind := map[string]int{}
	for _, ev := range S.events {
		byKind[ev.kind]++
	}
	fmt.Fprintf(&b, "\nChaos: %d events:", len(S.events))
	evKinds := make([]string, 0, len(byKind))
	for k := range byKind {
		evKinds = append(evKinds, k)
	}
	sort.Strings(evKinds)
	for _, k := range evKinds {
		fmt.Fprintf(&b, " %s %d;", k, byKind[k])
	}
	fmt.Fprintf(&b, "\n\nFailures: %d\n\n", len(S.failures))
	var unexplained []string
	if len(S.failures) > 0 {
		fmt.Fprintln(&b, "| at | operation | reason | explained by (chaos on its path) |")
		fmt.Fprintln(&b, "|---|---|---|---|")
		for _, f := range S.failures {
			on, off := S.explain(f)
			d := strings.Join(on, "; ")
			if len(on) == 0 {
				unexplained = append(unexplained, fmt.Sprintf("%s %s (path %v, sites %v; %d chaos events in its time, none on its path): %s",
					S.since(f.until), f.op, f.path.nodes, S.paths.reach(f.path, S.events, f.from, f.until), off, f.reason))
				d = "**none**"
			}
			if off > 0 {
				d += fmt.Sprintf(" (and %d off its path)", off)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", S.since(f.until), f.op, strings.ReplaceAll(f.reason, "|", "/"), d)
		}
		fmt.Fprintf(&b, "\nUnexplained (no chaos event on its path in its time or %v after): %d\n", chaosGrace, len(unexplained))
	}
	fmt.Fprintln(&b)
	S.stallReport(&b)
	fmt.Fprintln(&b)
	S.homeReport(&b)
	S.resources(&b)
	t.Log("\n" + b.String())
	if p := os.Getenv("GRIDLINK_SOAK_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	if n := S.corrupt.Load() + S.lost.Load(); n > 0 {
		t.Errorf("%d bytes (or lines) corrupted or lost", n)
	}
	if len(unexplained) > 0 {
		t.Errorf("%d failures explained by no chaos event on their path:\n%s", len(unexplained), strings.Join(unexplained, "\n"))
	}
	if len(S.away) > 0 {
		t.Errorf("%d node agents not at their home hub %v after the traffic ended: %s", len(S.away), homeWait, strings.Join(S.away, ", "))
	}
}
