package cli

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink"
)

func TestParseBytes(t *testing.T) {
	for s, want := range map[string]int64{"": 0, "100": 100, "12M": 12 << 20, "1.5K": 1536, "2g": 2 << 30} {
		if n, err := parseBytes(s); err != nil || n != want {
			t.Errorf("parseBytes(%q) = %d %v, want %d", s, n, err, want)
		}
	}
	for _, s := range []string{"x", "-1", "M"} {
		if _, err := parseBytes(s); err == nil {
			t.Errorf("parseBytes(%q) accepted", s)
		}
	}
}

// Not on a terminal, progress is plain periodic lines, and errors are
// printed as they come.
func TestProgressPlain(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := newProgress(w, 50*time.Millisecond, false)
	p.event(gridlink.CopyStarted{Kind: gridlink.CopyPut, Node: "cp"})
	p.event(gridlink.CopyPlanned{Files: 2, Bytes: 3 << 20})
	p.event(gridlink.FileStarted{ID: 1, Path: "a", Size: 2 << 20})
	p.event(gridlink.FileBytes{ID: 1, Path: "a", Size: 2 << 20, Done: 1 << 20})
	time.Sleep(120 * time.Millisecond)
	p.event(gridlink.FileDone{ID: 1, Path: "a", Size: 2 << 20})
	p.event(gridlink.FileDone{ID: 2, Path: "b", Size: 1 << 20, Err: "b: no space left on device"})
	p.stop()
	w.Close()
	out, _ := io.ReadAll(r)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 3 || strings.Contains(string(out), "\x1b[") {
		t.Fatalf("progress output:\n%s", out)
	}
	if !strings.Contains(string(out), "total 1.0 MiB / 3.0 MiB, 0 / 2 files") || !strings.Contains(string(out), "gridlink cp: b: no space left on device\n") ||
		!strings.Contains(lines[len(lines)-1], "total 2.0 MiB / 3.0 MiB, 2 / 2 files") {
		t.Errorf("progress output:\n%s", out)
	}
}

// The first progress line has no rate yet ("-", not "0 B/s"), and
// directories are not counted as files.
func TestProgressFirstLineAndDirs(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := newProgress(w, time.Hour, false)
	p.event(gridlink.CopyStarted{Kind: gridlink.CopyPut, Node: "cp"})
	p.event(gridlink.CopyPlanned{Files: 1, Bytes: 1 << 20})
	p.event(gridlink.DirDone{ID: 1, Path: "d"})
	p.event(gridlink.FileStarted{ID: 2, Path: "d/a", Size: 1 << 20})
	p.event(gridlink.FileDone{ID: 2, Path: "d/a", Size: 1 << 20})
	p.stop()
	w.Close()
	out, _ := io.ReadAll(r)
	if !strings.Contains(string(out), "total 1.0 MiB / 1.0 MiB, 1 / 1 files (1 directories), -, ETA -") || strings.Contains(string(out), "0 B/s") {
		t.Errorf("progress output:\n%s", out)
	}
}

// A copy that fails before it starts (its node, its delegation) shows no
// progress.
func TestProgressNotStarted(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := newProgress(w, 10*time.Millisecond, false)
	p.stop()
	w.Close()
	if out, _ := io.ReadAll(r); len(out) != 0 {
		t.Errorf("progress of a copy that never started:\n%s", out)
	}
}
