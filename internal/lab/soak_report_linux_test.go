package lab_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/netns"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// What the soak samples of its long-running processes every 10 s: RSS
// and threads (/proc/PID/status), open file descriptors (/proc/PID/fd),
// goroutines (go_goroutines of the process's metrics, scraped on its
// namespace's loopback); and the report at the end, with each figure's
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
	at                       time.Time
	rssKiB, threads, fds, gr int64 // gr: goroutines, -1 if not scraped
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
		smp.gr = -1
		if p.metrics > 0 {
			if g, err := goroutines(p.h, p.metrics); err == nil {
				smp.gr = g
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

// goroutines scrapes go_goroutines from the metrics on port of h's
// loopback (inside h's namespace).
func goroutines(h *topology.Host, port int) (int64, error) {
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
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 4<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no go_goroutines in the metrics of %s:%d", h.ID(), port)
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
	fmt.Fprintln(w, "| process | runs | samples (after warm-up) | RSS MiB first → last | RSS MiB/h | goroutines first → last | goroutines/h | fds first → last | fds/h |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, n := range names {
		var best *series
		for _, s := range S.series[n] {
			if best == nil || len(s.samples) > len(best.samples) {
				best = s
			}
		}
		ws := S.warm(best)
		if len(ws) < 3 {
			fmt.Fprintf(w, "| %s | %d | %d | | | | | | |\n", n, len(S.series[n]), len(ws))
			continue
		}
		first, last := ws[0], ws[len(ws)-1]
		rss, _ := slope(ws, func(s procSample) float64 { return float64(s.rssKiB) / 1024 })
		fds, _ := slope(ws, func(s procSample) float64 { return float64(s.fds) })
		gr := "n/a (threads " + fmt.Sprint(first.threads, " → ", last.threads) + ")"
		grSlope := "n/a"
		if first.gr >= 0 && last.gr >= 0 {
			gr = fmt.Sprint(first.gr, " → ", last.gr)
			var kept []procSample
			for _, s := range ws {
				if s.gr >= 0 {
					kept = append(kept, s)
				}
			}
			if g, ok := slope(kept, func(s procSample) float64 { return float64(s.gr) }); ok {
				grSlope = fmt.Sprintf("%+.1f", g)
			}
		}
		fmt.Fprintf(w, "| %s | %d | %d | %.1f → %.1f | %+.2f | %s | %s | %d → %d | %+.1f |\n", n, len(S.series[n]), len(ws),
			float64(first.rssKiB)/1024, float64(last.rssKiB)/1024, rss, gr, grSlope, first.fds, last.fds, fds)
	}
}
