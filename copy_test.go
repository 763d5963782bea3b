package gridlink

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestSplitRemote(t *testing.T) {
	for arg, want := range map[string][3]string{
		"das3v:data/x": {"das3v", "data/x", "remote"},
		"das3v:":       {"das3v", ".", "remote"},
		"./a:b":        {"", "./a:b", "local"},
		"/abs/path":    {"", "/abs/path", "local"},
		":x":           {"", ":x", "local"},
		"file":         {"", "file", "local"},
	} {
		n, p, ok := splitRemote(arg)
		if n != want[0] || p != want[1] || ok != (want[2] == "remote") {
			t.Errorf("splitRemote(%q) = %q %q %v, want %v", arg, n, p, ok, want)
		}
	}
}

// PlanCopy decides put, get or push as scp does, and refuses mixed
// sources and copies with no remote end in a typed error.
func TestPlanCopy(t *testing.T) {
	for _, c := range []struct {
		srcs []string
		dst  string
		want CopyPlan
	}{
		{[]string{"a", "b/c"}, "das3v:runs", CopyPlan{Kind: CopyPut, Srcs: []string{"a", "b/c"}, DstNode: "das3v", Dst: "runs"}},
		{[]string{"das3v:x", "das3v:y"}, "./here", CopyPlan{Kind: CopyGet, SrcNode: "das3v", Srcs: []string{"x", "y"}, Dst: "./here"}},
		{[]string{"das3v:x"}, "g5k:", CopyPlan{Kind: CopyPush, SrcNode: "das3v", Srcs: []string{"x"}, DstNode: "g5k", Dst: "."}},
	} {
		got, err := PlanCopy(c.srcs, c.dst)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("PlanCopy(%q, %q) = %+v %v, want %+v", c.srcs, c.dst, got, err, c.want)
		}
	}
	for _, c := range []struct {
		srcs []string
		dst  string
		arg  string
	}{
		{[]string{"das3v:x", "g5k:y"}, "here", "g5k:y"},
		{[]string{"das3v:x", "local"}, "here", "local"},
		{[]string{"local", "das3v:x"}, "g5k:", "das3v:x"},
		{[]string{"a"}, "b", ""},
	} {
		_, err := PlanCopy(c.srcs, c.dst)
		var ae *CopyArgError
		if !errors.As(err, &ae) || ae.Arg != c.arg {
			t.Errorf("PlanCopy(%q, %q): %v; want a CopyArgError for %q", c.srcs, c.dst, err, c.arg)
		}
	}
}

// The meter: files and bytes done of those planned (directories apart, a
// failed file finished but not stored), the newest files first, no rate
// from a single sample, then the rate over the window.
func TestCopyMeter(t *testing.T) {
	m := NewCopyMeter()
	// while the copy's connection is set up nothing moves: no rate yet,
	// however long it takes (a lab run showed 0 B/s for 4 s)
	tz := time.Unix(990, 0)
	for i := range 4 {
		if st := m.Status(tz.Add(time.Duration(i) * time.Second)); st.HasRate || st.HasETA {
			t.Fatalf("status before any byte moved: %+v", st)
		}
	}
	m = NewCopyMeter()
	m.Add(CopyPlanned{Files: 3, Bytes: 30 << 20})
	m.Add(DirDone{ID: 1, Path: "d"})
	m.Add(FileStarted{ID: 2, Path: "d/a", Size: 10 << 20})
	m.Add(FileStarted{ID: 3, Path: "d/b", Size: 10 << 20})
	m.Add(FileBytes{ID: 2, Path: "d/a", Size: 10 << 20, Done: 4 << 20})
	t0 := time.Unix(1000, 0)
	st := m.Status(t0)
	if st.HasRate || st.HasETA || st.Bytes != 4<<20 || st.Files != 0 || st.TotalFiles != 3 || st.Dirs != 1 ||
		len(st.Active) != 2 || st.Active[0].Path != "d/b" || st.Active[1].Done != 4<<20 {
		t.Fatalf("first status: %+v", st)
	}
	m.Add(FileDone{ID: 2, Path: "d/a", Size: 10 << 20})
	m.Add(FileDone{ID: 3, Path: "d/b", Size: 10 << 20, Err: "d/b: no space left on device"})
	st = m.Status(t0.Add(2 * time.Second))
	if !st.HasRate || st.Rate != 3<<20 || st.Bytes != 10<<20 || st.Files != 2 || len(st.Active) != 0 ||
		!st.HasETA || st.ETA != 20*time.Second/3 {
		t.Fatalf("second status: %+v", st)
	}
	// the window: the oldest sample drops out once the next is older than
	// RateWindow
	m.Add(FileStarted{ID: 4, Path: "d/c", Size: 10 << 20})
	m.Add(FileBytes{ID: 4, Path: "d/c", Size: 10 << 20, Done: 10 << 20})
	if st = m.Status(t0.Add(10 * time.Second)); st.Rate != float64(10<<20)/8 {
		t.Errorf("rate from 2 s to 10 s: %v", st.Rate)
	}
	if st = m.Status(t0.Add(12 * time.Second)); st.Rate != float64(10<<20)/10 || !st.HasETA || st.ETA != 10*time.Second {
		t.Errorf("rate from 2 s to 12 s: %+v", st)
	}
}
