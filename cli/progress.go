package cli

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gridlink/gridlink/xfer"
)

// progress displays a copy's progress from its events: on a terminal, a
// bar per file being copied (the most recent few) and one for the total,
// redrawn in place; otherwise a plain line every interval.
type progress struct {
	out      io.Writer
	tty      bool
	interval time.Duration
	quiet    bool

	mu      sync.Mutex
	files   map[uint32]*fileBar
	total   int64 // bytes planned
	nfiles  int64
	done    int64 // bytes of finished files
	ndone   int64
	ndirs   int64 // directories made or there (not files)
	start   time.Time
	samples []sample // (time, bytes) for the rate, the last rateWindow
	drawn   int      // lines drawn last (tty)
	tick    *time.Ticker
	quit    chan struct{}
	ended   chan struct{}
}

type fileBar struct {
	path    string
	size, n int64
	started time.Time
}

type sample struct {
	t time.Time
	n int64
}

const (
	rateWindow = 5 * time.Second
	maxBars    = 4
)

func newProgress(f *os.File, interval time.Duration, quiet bool) *progress {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	p := &progress{out: f, tty: err == nil, interval: interval, quiet: quiet, files: map[uint32]*fileBar{},
		start: time.Now(), quit: make(chan struct{}), ended: make(chan struct{})}
	every := interval
	if p.tty {
		every = 200 * time.Millisecond
	}
	if quiet || every <= 0 {
		close(p.ended)
		return p
	}
	p.tick = time.NewTicker(every)
	go func() {
		defer close(p.ended)
		for {
			select {
			case <-p.quit:
				return
			case <-p.tick.C:
				p.mu.Lock()
				p.draw()
				p.mu.Unlock()
			}
		}
	}()
	return p
}

func (p *progress) event(e xfer.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e.Kind {
	case xfer.EventPlan:
		p.total, p.nfiles = e.Size, e.N
	case xfer.EventStart:
		p.files[e.ID] = &fileBar{path: e.Path, size: e.Size, started: time.Now()}
	case xfer.EventDir:
		p.ndirs++
	case xfer.EventBytes:
		if f := p.files[e.ID]; f != nil {
			f.n = e.N
		}
	case xfer.EventDone:
		if f := p.files[e.ID]; f != nil || e.ID != 0 {
			delete(p.files, e.ID)
			p.ndone++
			if e.Err == "" {
				p.done += e.Size
			}
		}
		if e.Err != "" && !p.quiet {
			p.clear()
			fmt.Fprintf(p.out, "gridlink cp: %s\n", e.Err) // errors name their paths
		}
	}
}

// log prints a line between redraws.
func (p *progress) log(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintf(p.out, "gridlink cp: %s\n", line)
}

// stop draws the final state and stops redrawing.
func (p *progress) stop() {
	if p.tick != nil {
		p.tick.Stop()
		close(p.quit)
	}
	<-p.ended
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.quiet {
		p.draw()
		if p.tty {
			p.drawn = 0
		}
	}
}

// clear erases the bars drawn last (tty).
func (p *progress) clear() {
	if p.tty && p.drawn > 0 {
		fmt.Fprintf(p.out, "\x1b[%dA\x1b[J", p.drawn)
		p.drawn = 0
	}
}

func (p *progress) draw() {
	now := time.Now()
	cur := p.done
	for _, f := range p.files {
		cur += f.n
	}
	p.samples = append(p.samples, sample{now, cur})
	for len(p.samples) > 2 && now.Sub(p.samples[1].t) > rateWindow {
		p.samples = p.samples[1:]
	}
	// the rate over the window, once there is one: the first draw has
	// a single sample and says "-", not 0 B/s
	rate, rateText := 0.0, "-"
	if s := p.samples[0]; len(p.samples) > 1 && now.Sub(s.t) > 0 {
		rate = float64(cur-s.n) / now.Sub(s.t).Seconds()
		rateText = size(int64(rate)) + "/s"
	}
	eta := "-"
	if rate > 0 && p.total > cur {
		eta = time.Duration(float64(p.total-cur) / rate * float64(time.Second)).Round(time.Second).String()
	}
	dirs := ""
	if p.ndirs > 0 {
		dirs = fmt.Sprintf(" (%d directories)", p.ndirs)
	}
	total := fmt.Sprintf("total %s / %s, %d / %d files%s, %s, ETA %s", size(cur), size(p.total), p.ndone, p.nfiles, dirs, rateText, eta)
	if !p.tty {
		fmt.Fprintf(p.out, "%6.1f s  %s\n", now.Sub(p.start).Seconds(), total)
		return
	}
	p.clear()
	ids := make([]uint32, 0, len(p.files))
	for id := range p.files {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] > ids[j] })
	var lines []string
	for _, id := range ids[:min(len(ids), maxBars)] {
		f := p.files[id]
		lines = append(lines, barLine(f.path, f.n, f.size, 30))
	}
	lines = append(lines, barLine(total, cur, p.total, 30))
	for _, l := range lines {
		fmt.Fprintln(p.out, l)
	}
	p.drawn = len(lines)
}

// barLine is "[#####.....]  42% label".
func barLine(label string, n, of int64, width int) string {
	frac := 1.0
	if of > 0 {
		frac = min(float64(n)/float64(of), 1)
	}
	k := int(frac * float64(width))
	if len(label) > 60 {
		label = "..." + label[len(label)-57:]
	}
	return fmt.Sprintf("[%s%s] %3.0f%% %s", strings.Repeat("#", k), strings.Repeat(".", width-k), 100*frac, label)
}

// size is a byte count for people.
func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
