package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gridlink/gridlink"
)

// openPTY opens a pseudo-terminal of cols columns: its master (what a
// terminal emulator reads) and its slave (the program's terminal).
func openPTY(t *testing.T, cols, rows int) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// screen collects what a pseudo-terminal's master reads.
type screen struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	done chan struct{}
}

func readScreen(m *os.File) *screen {
	s := &screen{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		b := make([]byte, 4096)
		for {
			n, err := m.Read(b)
			s.mu.Lock()
			s.buf.Write(b[:n])
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return s
}

func (s *screen) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.ReplaceAll(s.buf.String(), "\r", "")
}

// waitText waits (10 s at most) for the screen to show want.
func (s *screen) waitText(t *testing.T, want string) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !strings.Contains(s.text(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the terminal never showed %q:\n%q", want, s.text())
		}
	}
}

var redrawSeq = regexp.MustCompile(`\x1b\[\d+A\x1b\[J`)

// On a terminal, cp draws mpb bars redrawn in place: a bar per file
// under way (###...]  50% path", 30 wide) above the total; the first
// total has no rate yet ("-", not "0 B/s"); directories are not counted
// as files; a file's failure is printed above the bars; the last frame
// stays, without the finished file's bar.
func TestProgressTerminalBars(t *testing.T) {
	master, slave := openPTY(t, 120, 40)
	scr := readScreen(master)
	p := newProgress(slave, time.Hour, false)
	p.event(gridlink.CopyStarted{Kind: gridlink.CopyPut, Node: "cp"})
	if !p.tty || p.bars == nil {
		t.Fatal("a pseudo-terminal is not taken for a terminal")
	}
	p.event(gridlink.CopyPlanned{Files: 2, Bytes: 3 << 20})
	p.event(gridlink.DirDone{ID: 1, Path: "d"})
	p.event(gridlink.FileStarted{ID: 2, Path: "d/a", Size: 2 << 20})
	p.event(gridlink.FileBytes{ID: 2, Path: "d/a", Size: 2 << 20, Done: 1 << 20})
	p.draw()
	first := "total 1.0 MiB / 3.0 MiB, 0 / 2 files (1 directories), -, ETA -"
	scr.waitText(t, first)
	p.event(gridlink.FileDone{ID: 2, Path: "d/a", Size: 2 << 20})
	p.event(gridlink.FileDone{ID: 3, Path: "d/b", Size: 1 << 20, Err: "d/b: no space left on device"})
	p.stop()
	slave.Close()
	<-scr.done
	out := scr.text()

	frames := redrawSeq.Split(out, -1)
	if len(frames) < 2 {
		t.Fatalf("no redraw in place:\n%q", out)
	}
	firstFrame := ""
	for _, f := range frames {
		if strings.Contains(f, "total") {
			firstFrame = f
			break
		}
	}
	wantBar := regexp.MustCompile(`(?m)^\[#{15}\.{15}\]  50% d/a$`)
	wantTotal := regexp.MustCompile(`(?m)^\[#{10}\.{20}\]  33% ` + regexp.QuoteMeta(first) + `$`)
	if !wantBar.MatchString(firstFrame) || !wantTotal.MatchString(firstFrame) || strings.Index(firstFrame, "d/a") > strings.Index(firstFrame, "total") {
		t.Errorf("first frame, want d/a's bar above the total:\n%s", firstFrame)
	}
	if strings.Count(out, "gridlink cp: d/b: no space left on device\n") != 1 {
		t.Errorf("d/b's failure not printed once:\n%q", out)
	}
	last := strings.TrimSpace(frames[len(frames)-1])
	if last == "" && len(frames) > 1 {
		last = strings.TrimSpace(frames[len(frames)-2])
	}
	lastTotal := regexp.MustCompile(`^\[#{20}\.{10}\]  67% total 2\.0 MiB / 3\.0 MiB, 2 / 2 files \(1 directories\), [^,]+/s, ETA [^ ]+$`)
	if !lastTotal.MatchString(last) {
		t.Errorf("last frame, want the total alone:\n%q", last)
	}
	if strings.Contains(firstFrame, "0 B/s") {
		t.Errorf("a rate before there is one:\n%s", firstFrame)
	}
	if err := p.bars.p.Error; err != nil && !errors.Is(err, os.ErrClosed) {
		t.Errorf("mpb: %v", err)
	}
}

// A terminal that tells no size (as under script(1) with its input not a
// terminal) still gets bars, 80 columns wide, redrawn in place.
func TestProgressTerminalWithoutSize(t *testing.T) {
	master, slave := openPTY(t, 0, 0)
	scr := readScreen(master)
	p := newProgress(slave, time.Hour, false)
	p.event(gridlink.CopyStarted{Kind: gridlink.CopyPut, Node: "cp"})
	if p.bars == nil {
		t.Fatal("no bars on a terminal without a size")
	}
	p.event(gridlink.CopyPlanned{Files: 1, Bytes: 1 << 20})
	p.event(gridlink.FileStarted{ID: 1, Path: "a", Size: 1 << 20})
	p.draw()
	scr.waitText(t, "]   0% total 0 B / 1.0 MiB, 0 / 1 files, -, ETA -")
	p.event(gridlink.FileDone{ID: 1, Path: "a", Size: 1 << 20})
	p.stop()
	slave.Close()
	<-scr.done
	out := scr.text()
	for _, l := range strings.Split(redrawSeq.ReplaceAllString(out, "\n"), "\n") {
		if len(l) > 80 {
			t.Errorf("a line wider than 80 columns: %q", l)
		}
	}
	if !redrawSeq.MatchString(out) || !strings.Contains(out, "[..............................]   0% a\n") ||
		!strings.Contains(out, "total 1.0 MiB / 1.0 MiB, 1 / 1 files") {
		t.Errorf("terminal output:\n%q", out)
	}
}
