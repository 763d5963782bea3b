package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"golang.org/x/term"

	"github.com/gridlink/gridlink"
)

// progress displays a copy's progress from its events, summed by a
// gridlink.CopyMeter: on a terminal, a bar per file being copied (the
// most recent few) and one for the total, redrawn in place (termBars, on
// mpb); otherwise a plain line every interval.
type progress struct {
	out      io.Writer
	tty      bool
	interval time.Duration
	quiet    bool
	meter    *gridlink.CopyMeter
	start    time.Time

	opts []mpb.ContainerOption // of the bars

	mu    sync.Mutex // one line, or one redraw, at a time
	begun bool       // the copy started (the display with it)
	bars  *termBars  // on a terminal
	tick  *time.Ticker
	quit  chan struct{}
	ended chan struct{}
}

// newProgress displays on f, with bars if it is a terminal. A terminal
// that tells no size (a pseudo-terminal nobody sized) gets bars 80
// columns wide: mpb would draw no row on it.
func newProgress(f *os.File, interval time.Duration, quiet bool) *progress {
	if !term.IsTerminal(int(f.Fd())) {
		return startProgress(f, false, interval, quiet)
	}
	if w, h, err := term.GetSize(int(f.Fd())); err != nil || w == 0 || h == 0 {
		return startProgress(struct{ io.Writer }{f}, true, interval, quiet, mpb.ForceTTY(), mpb.WithWidth(80))
	}
	return startProgress(f, true, interval, quiet)
}

// startProgress displays on out, with bars (made with opts) if tty, from
// the copy's start (gridlink.CopyStarted) on.
func startProgress(out io.Writer, tty bool, interval time.Duration, quiet bool, opts ...mpb.ContainerOption) *progress {
	return &progress{out: out, tty: tty, interval: interval, quiet: quiet, meter: gridlink.NewCopyMeter(),
		quit: make(chan struct{}), ended: make(chan struct{}), opts: opts}
}

// begin starts the display.
func (p *progress) begin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.begun {
		return
	}
	p.begun, p.start = true, time.Now()
	every := p.interval
	if p.tty {
		every = 200 * time.Millisecond
	}
	if p.quiet || every <= 0 {
		close(p.ended)
		return
	}
	if p.tty {
		p.bars = newTermBars(p.out, p.opts...)
	}
	p.tick = time.NewTicker(every)
	go func() {
		defer close(p.ended)
		for {
			select {
			case <-p.quit:
				return
			case <-p.tick.C:
				p.draw()
			}
		}
	}()
}

// event is a gridlink.CopyConfig.Progress: it starts the display when
// the copy starts, counts e, and prints a file's failure as it comes.
func (p *progress) event(e gridlink.CopyEvent) {
	if _, ok := e.(gridlink.CopyStarted); ok {
		p.begin()
		return
	}
	p.meter.Add(e)
	if d, ok := e.(gridlink.FileDone); ok && d.Err != "" && !p.quiet {
		p.print(d.Err) // errors name their paths
	}
}

// log prints a line between redraws.
func (p *progress) log(line string) { p.print(line) }

func (p *progress) print(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line = "gridlink cp: " + line + "\n"
	if p.bars != nil {
		p.bars.print(line)
		return
	}
	io.WriteString(p.out, line)
}

// stop draws the final state and stops redrawing (if the copy started).
func (p *progress) stop() {
	p.mu.Lock()
	begun := p.begun
	p.mu.Unlock()
	if !begun {
		return
	}
	if p.tick != nil {
		p.tick.Stop()
		close(p.quit)
	}
	<-p.ended
	if p.quiet {
		return
	}
	p.draw()
	if p.bars != nil {
		p.bars.finish()
	}
}

func (p *progress) draw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	st := p.meter.Status(now)
	if p.bars != nil {
		p.bars.update(st, totalLine(st))
		return
	}
	fmt.Fprintf(p.out, "%6.1f s  %s\n", now.Sub(p.start).Seconds(), totalLine(st))
}

// totalLine is "total 1.0 MiB / 3.0 MiB, 0 / 2 files (1 directories),
// 512.0 KiB/s, ETA 4s": the rate "-" until there is one, never 0 B/s
// before.
func totalLine(st gridlink.CopyStatus) string {
	rate, eta := "-", "-"
	if st.HasRate {
		rate = size(int64(st.Rate)) + "/s"
	}
	if st.HasETA {
		eta = st.ETA.Round(time.Second).String()
	}
	dirs := ""
	if st.Dirs > 0 {
		dirs = fmt.Sprintf(" (%d directories)", st.Dirs)
	}
	return fmt.Sprintf("total %s / %s, %d / %d files%s, %s, ETA %s", size(st.Bytes), size(st.TotalBytes), st.Files, st.TotalFiles, dirs, rate, eta)
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
