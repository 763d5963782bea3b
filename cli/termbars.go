package cli

import (
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/gridlink/gridlink"
)

const (
	maxBars  = 4  // file bars shown, the newest files'
	barWidth = 30 // between the brackets
)

// termBars are cp's bars on a terminal (mpb): one per file under way, the
// newest maxBars on top, and the total below, as
// "[#########.....................]  30% label". They are redrawn when
// update says (mpb's manual refresh), lines printed go above them.
type termBars struct {
	p       *mpb.Progress
	refresh chan any
	total   *shownBar
	files   map[uint32]*shownBar
}

// shownBar is a bar and the text beside it.
type shownBar struct {
	bar *mpb.Bar
	mu  sync.Mutex
	txt string
}

func (b *shownBar) text(decor.Statistics) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.txt
}

// set shows n of of (a bar full when of is 0) and label.
func (b *shownBar) set(n, of int64, label string) {
	frac := 1.0
	if of > 0 {
		frac = min(float64(n)/float64(of), 1)
	} else {
		n, of = 1, 1
	}
	b.mu.Lock()
	b.txt = fmt.Sprintf(" %3.0f%% %s", 100*frac, label)
	b.mu.Unlock()
	b.bar.SetTotal(of, false)
	b.bar.SetCurrent(min(n, of))
}

// shortPath is path, its end if it is longer than 60 bytes.
func shortPath(path string) string {
	if len(path) > 60 {
		return "..." + path[len(path)-57:]
	}
	return path
}

func newTermBars(out io.Writer, opts ...mpb.ContainerOption) *termBars {
	t := &termBars{refresh: make(chan any, 1), files: map[uint32]*shownBar{}}
	t.p = mpb.New(append([]mpb.ContainerOption{mpb.WithOutput(out), mpb.WithManualRefresh(t.refresh)}, opts...)...)
	t.total = t.add(math.MaxInt)
	return t
}

// add makes a bar at priority (lower is higher up), with no total yet
// (mpb's bars without one never complete by themselves).
func (t *termBars) add(priority int) *shownBar {
	b := &shownBar{}
	style := mpb.BarStyle().Lbound("[").Filler("#").Tip("#").Padding(".").Rbound("]")
	b.bar = t.p.New(0, style, mpb.BarPriority(priority), mpb.BarFillerTrim(),
		mpb.BarFillerMiddleware(func(f mpb.BarFiller) mpb.BarFiller {
			return mpb.BarFillerFunc(func(w io.Writer, st decor.Statistics) error {
				st.AvailableWidth = min(st.AvailableWidth, barWidth+2)
				return f.Fill(w, st)
			})
		}),
		mpb.AppendDecorators(decor.Any(b.text)))
	return b
}

// update shows st: the newest files' bars (made and dropped as files come
// and go) and the total with label; then redraws.
func (t *termBars) update(st gridlink.CopyStatus, label string) {
	shown := map[uint32]bool{}
	for _, f := range st.Active[:min(len(st.Active), maxBars)] {
		shown[f.ID] = true
		b := t.files[f.ID]
		if b == nil {
			b = t.add(int(math.MaxUint32 - f.ID)) // newer files higher up
			t.files[f.ID] = b
		}
		b.set(f.Done, f.Size, shortPath(f.Path))
	}
	for id, b := range t.files {
		if !shown[id] {
			b.bar.Abort(true)
			delete(t.files, id)
		}
	}
	t.total.set(st.Bytes, st.TotalBytes, label)
	t.redraw()
}

func (t *termBars) redraw() {
	select {
	case t.refresh <- struct{}{}:
	default: // a redraw is due anyway
	}
}

// print prints line above the bars (at the next redraw, which it asks
// for).
func (t *termBars) print(line string) {
	_, _ = t.p.Write([]byte(line))
	t.redraw()
}

// finish leaves the last state drawn and ends the display.
func (t *termBars) finish() {
	for _, b := range t.files {
		b.bar.Abort(false)
	}
	t.total.bar.Abort(false)
	t.p.Wait()
}
