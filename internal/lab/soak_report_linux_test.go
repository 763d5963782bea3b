package lab_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/netns"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// What the soak samples of its long-running processes every 10 s: RSS
// and threads (/proc/PID/status), open file descriptors (/proc/PID/fd),
// goroutines and the Go heap in use (go_goroutines and
// go_memstats_heap_inuse_bytes of the process's metrics, scraped on its
// namespace's loopback: RSS alone cannot tell a leak from memory the Go
// runtime has not returned yet); and the report at the end, with each figure's
// slope over the run by a least-squares line.

// sampleEvery is the time between samples.
const sampleEvery = 10 * time.Second

// soakProc is a process the soak samples.
type soakProc struct {
	name    string
	h       *topology.Host
	metrics int // its metrics port, 0 if none
	pid     int
}

// series are the samples of one run of a process.
type series struct {
	pid     int
	samples []procSample
}

type procSample struct {
	at                   time.Time
	rssKiB, threads, fds int64
	gr, heap             int64 // goroutines and Go heap in use (bytes), -1 if not scraped
}

func hubHostOf(s *topology.Site) *topology.Host { return matrix.HubHost(s) }

// track starts sampling a process.
func (S *soak) track(name string, h *topology.Host, metrics, pid int) {
	S.mu.Lock()
	defer S.mu.Unlock()
	S.procs = append(S.procs, soakProc{name: name, h: h, metrics: metrics, pid: pid})
	S.series[name] = append(S.series[name], &series{pid: pid})
}

// retrack samples the new run of a restarted process.
func (S *soak) retrack(name string, h *topology.Host, metrics, pid int) {
	S.mu.Lock()
	defer S.mu.Unlock()
	for i := range S.procs {
		if S.procs[i].name == name {
			S.procs[i].pid = pid
		}
	}
	S.series[name] = append(S.series[name], &series{pid: pid})
}

// trackOverlay samples the overlay's hubs and node agents.
func (S *soak) trackOverlay() {
	for _, s := range S.topo.Sites {
		S.track("hub "+s.Name, hubHostOf(s), hubMetrics, S.o.HubPID(s.Name))
	}
	for _, h := range S.o.Nodes() {
		S.track("node "+h.ID(), h, nodeMetrics, S.o.NodePID(h))
	}
}

// sample samples every sampleEvery until ctx ends.
func (S *soak) sample(ctx context.Context) {
	for {
		S.sampleOnce()
		if !pause(ctx, sampleEvery) {
			return
		}
	}
}

func (S *soak) sampleOnce() {
	S.mu.Lock()
	procs := append([]soakProc(nil), S.procs...)
	S.mu.Unlock()
	for _, p := range procs {
		if S.isDown(p.name) {
			continue
		}
		smp, ok := readProc(p.pid)
		if !ok {
			continue
		}
		smp.gr, smp.heap = -1, -1
		if p.metrics > 0 {
			if g, b, err := scrape(p.h, p.metrics); err == nil {
				smp.gr, smp.heap = g, b
			}
		}
		S.mu.Lock()
		ss := S.series[p.name]
		if cur := ss[len(ss)-1]; cur.pid == p.pid {
			cur.samples = append(cur.samples, smp)
		}
		S.mu.Unlock()
	}
}

// readProc reads a live process's RSS, threads and open files.
func readProc(pid int) (procSample, bool) {
	s := procSample{at: time.Now()}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fs[0], 10, 64)
		switch k {
		case "State":
			if fs[0] == "Z" {
				return s, false
			}
		case "VmRSS":
			s.rssKiB = n
		case "Threads":
			s.threads = n
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, false
	}
	s.fds = int64(len(ents))
	return s, true
}

// scrape reads go_goroutines and go_memstats_heap_inuse_bytes from the
// metrics on port of h's loopback (inside h's namespace).
func scrape(h *topology.Host, port int) (goroutines, heap int64, err error) {
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		var c net.Conn
		err := netns.Do(lab.HostNS(h), func() (err error) {
			c, err = net.DialTimeout("tcp", addr, 2*time.Second)
			return err
		})
		return c, err
	}}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	m := metricValues(io.LimitReader(resp.Body, 4<<20), "go_goroutines", "go_memstats_heap_inuse_bytes")
	g, ok1 := m["go_goroutines"]
	b, ok2 := m["go_memstats_heap_inuse_bytes"]
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("the metrics of %s:%d lack go_goroutines or go_memstats_heap_inuse_bytes", h.ID(), port)
	}
	return int64(g), int64(b), nil
}

// metricValues reads the named unlabelled samples of a Prometheus text
// exposition.
func metricValues(r io.Reader, names ...string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			out[name] = f
		}
	}
	return out
}

// slope is the least-squares slope of ys over the samples' times, per
// hour; ok false with fewer than three samples.
func slope(ss []procSample, y func(procSample) float64) (float64, bool) {
	if len(ss) < 3 {
		return 0, false
	}
	t0 := ss[0].at
	var n, sx, sy, sxx, sxy float64
	for _, s := range ss {
		x := s.at.Sub(t0).Hours()
		v := y(s)
		n++
		sx += x
		sy += v
		sxx += x * x
		sxy += x * v
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0, false
	}
	return (n*sxy - sx*sy) / d, true
}

// warm are a run's samples after its first minutes (a fifth of the
// soak, at most two minutes): start-up growth is not a leak.
func (S *soak) warm(s *series) []procSample {
	if len(s.samples) == 0 {
		return nil
	}
	skip := min(S.end.Sub(S.start)/5, 2*time.Minute)
	from := s.samples[0].at.Add(skip)
	for i, smp := range s.samples {
		if !smp.at.Before(from) {
			return s.samples[i:]
		}
	}
	return nil
}

// resources is the report's table of each process's longest run.
func (S *soak) resources(w io.Writer) {
	names := make([]string, 0, len(S.series))
	for n := range S.series {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "| process | runs | samples (after warm-up) | RSS MiB first → last | RSS MiB/h | Go heap in use MiB first → last | heap MiB/h | goroutines first → last | goroutines/h | fds first → last | fds/h |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, n := range names {
		var best *series
		for _, s := range S.series[n] {
			if best == nil || len(s.samples) > len(best.samples) {
				best = s
			}
		}
		ws := S.warm(best)
		if len(ws) < 3 {
			fmt.Fprintf(w, "| %s | %d | %d | | | | | | | | |\n", n, len(S.series[n]), len(ws))
			continue
		}
		first, last := ws[0], ws[len(ws)-1]
		rss, _ := slope(ws, func(s procSample) float64 { return float64(s.rssKiB) / 1024 })
		fds, _ := slope(ws, func(s procSample) float64 { return float64(s.fds) })
		gr, grSlope, heap, heapSlope := fmt.Sprint("n/a (threads ", first.threads, " → ", last.threads, ")"), "n/a", "n/a", "n/a"
		var scraped []procSample
		for _, s := range ws {
			if s.gr >= 0 {
				scraped = append(scraped, s)
			}
		}
		if len(scraped) >= 3 {
			f, l := scraped[0], scraped[len(scraped)-1]
			gr = fmt.Sprint(f.gr, " → ", l.gr)
			heap = fmt.Sprintf("%.1f → %.1f", float64(f.heap)/(1<<20), float64(l.heap)/(1<<20))
			g, _ := slope(scraped, func(s procSample) float64 { return float64(s.gr) })
			hp, _ := slope(scraped, func(s procSample) float64 { return float64(s.heap) / (1 << 20) })
			grSlope, heapSlope = fmt.Sprintf("%+.1f", g), fmt.Sprintf("%+.2f", hp)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %.1f → %.1f | %+.2f | %s | %s | %s | %s | %d → %d | %+.1f |\n", n, len(S.series[n]), len(ws),
			float64(first.rssKiB)/1024, float64(last.rssKiB)/1024, rss, heap, heapSlope, gr, grSlope, first.fds, last.fds, fds)
	}
}

// The soak reads a process's goroutines and heap from its /metrics text:
// the unlabelled samples named, in any float form, and nothing of
// labelled series, comments or names that only begin alike.
func TestSoakMetricValues(t *testing.T) {
	text := `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 42
go_goroutines_total{x="1"} 7
# TYPE go_memstats_heap_inuse_bytes gauge
go_memstats_heap_inuse_bytes 1.2345678e+07
gridlink_bytes_total{path="direct"} 99
`
	got := metricValues(strings.NewReader(text), "go_goroutines", "go_memstats_heap_inuse_bytes", "gridlink_bytes_total")
	want := map[string]float64{"go_goroutines": 42, "go_memstats_heap_inuse_bytes": 12345678}
	if len(got) != len(want) || got["go_goroutines"] != 42 || got["go_memstats_heap_inuse_bytes"] != 12345678 {
		t.Errorf("metricValues = %v, want %v", got, want)
	}
	ss := []procSample{}
	for i := range 5 {
		ss = append(ss, procSample{at: time.Unix(0, 0).Add(time.Duration(i) * 15 * time.Minute), rssKiB: int64(100 + 10*i)})
	}
	if s, ok := slope(ss, func(p procSample) float64 { return float64(p.rssKiB) }); !ok || s < 39.999 || s > 40.001 {
		t.Errorf("slope of 10 per quarter hour = %v (%v), want 40 per hour", s, ok)
	}
}
