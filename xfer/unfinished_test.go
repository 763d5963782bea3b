package xfer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A copy of a tree into a new directory (which takes the source's place)
// that dies half way is continued by --resume in that directory, keeping
// what it stored, although the directory now exists (by scp's rules a
// fresh copy goes into it). Issue 17, item 4.
func TestResumeIntoNewDirectory(t *testing.T) {
	src := t.TempDir()
	size := 8 * DefaultBlock
	randomFile(t, filepath.Join(src, "cpsrc", "big"), size, 0o644)
	randomFile(t, filepath.Join(src, "cpsrc", "sub", "small"), 1000, 0o600)
	os.Chmod(filepath.Join(src, "cpsrc", "sub"), 0o750)
	root := t.TempDir()
	dial, _ := service(t, Config{Root: root})
	kill := Options{Recursive: true, Retries: -1}
	resume := Options{Recursive: true, Resume: true}
	check := func(how, dst string, sum Summary, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		sameFile(t, filepath.Join(src, "cpsrc", "big"), filepath.Join(dst, "big"))
		sameFile(t, filepath.Join(src, "cpsrc", "sub", "small"), filepath.Join(dst, "sub", "small"))
		if fi, err := os.Stat(filepath.Join(dst, "sub")); err != nil || fi.Mode().Perm() != 0o750 {
			t.Errorf("%s: sub: %v %v, want mode 0750", how, fi, err)
		}
		if _, err := os.Stat(filepath.Join(dst, "cpsrc")); !os.IsNotExist(err) {
			t.Errorf("%s: the resumed copy went into %s/cpsrc (%v)", how, dst, err)
		}
		left, _ := filepath.Glob(filepath.Join(dst, ".*"))
		if len(left) > 0 {
			t.Errorf("%s: left behind: %v", how, left)
		}
		if sum.Kept < int64(size/4) || sum.Sent > int64(size)*3/4+2*DefaultBlock {
			t.Errorf("%s: kept %d, sent %d of %d: not continued", how, sum.Kept, sum.Sent, size+1000)
		}
	}

	// put: the service decides the placement
	if _, err := Put(ctx, dropAfter(dial, int64(size/2)), []string{filepath.Join(src, "cpsrc")}, "dst", kill); err == nil {
		t.Fatal("the first put was not cut")
	}
	if b, err := os.ReadFile(filepath.Join(root, "dst", UnfinishedFile)); err != nil || string(b) != "cpsrc\n" {
		t.Errorf("the unfinished copy's mark: %q %v", b, err)
	}
	sum, err := Put(ctx, dial, []string{filepath.Join(src, "cpsrc")}, "dst", resume)
	check("put", filepath.Join(root, "dst"), sum, err)

	// get: this end decides
	back := filepath.Join(t.TempDir(), "dst")
	if _, err := Get(ctx, dropAfter(dial, int64(size/2)), []string{"dst"}, back, kill); err == nil {
		t.Fatal("the first get was not cut")
	}
	sum, err = Get(ctx, dial, []string{"dst"}, back, resume)
	check("get", back, sum, err)

	// a resumed copy of another source into it is refused, in words
	other := filepath.Join(src, "other")
	randomFile(t, filepath.Join(other, "x"), 10, 0o644)
	if _, err := Put(ctx, dropAfter(dial, int64(size/2)), []string{filepath.Join(src, "cpsrc")}, "dst2", kill); err == nil {
		t.Fatal("the put to dst2 was not cut")
	}
	_, err = Put(ctx, dial, []string{other}, "dst2", resume)
	var re *RefusedError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "holds the unfinished copy of cpsrc") {
		t.Errorf("resume of another source: %v", err)
	}
	// a fresh copy keeps scp's rules (into it), and says where the
	// unfinished one is
	var notes []string
	_, err = Get(ctx, dial, []string{"dst"}, filepath.Join(root, "dst2"), Options{Recursive: true, Logf: func(f string, a ...any) {
		notes = append(notes, f)
	}})
	if err != nil {
		t.Fatal(err)
	}
	sameFile(t, filepath.Join(src, "cpsrc", "big"), filepath.Join(root, "dst2", "dst", "big"))
	if len(notes) != 1 {
		t.Errorf("a fresh copy into an unfinished one: notes %q, want one", notes)
	}
}

// Progress events count files as files: the plan's N is the regular
// files, and directories come as EventDir, not EventDone (issue 17,
// item 10: cp's progress counted directories as files).
func TestProgressCountsFiles(t *testing.T) {
	src, root := t.TempDir(), t.TempDir()
	randomFile(t, filepath.Join(src, "tree", "a"), 10, 0o644)
	randomFile(t, filepath.Join(src, "tree", "d", "b"), 10, 0o644)
	randomFile(t, filepath.Join(src, "tree", "d", "c"), 10, 0o644)
	dial, _ := service(t, Config{Root: root})
	for _, get := range []bool{false, true} {
		var plan, done, dirs int64
		o := Options{Recursive: true, Progress: func(e Event) {
			switch e.Kind {
			case EventPlan:
				plan = e.N
			case EventDone:
				done++
			case EventDir:
				dirs++
			}
		}}
		var err error
		if get {
			_, err = Get(ctx, dial, []string{"tree"}, filepath.Join(t.TempDir(), "back"), o)
		} else {
			_, err = Put(ctx, dial, []string{filepath.Join(src, "tree")}, "tree", o)
		}
		if err != nil {
			t.Fatal(err)
		}
		if plan != 3 || done != 3 || dirs != 2 {
			t.Errorf("get %v: plan of %d files, %d done, %d directories; want 3, 3, 2", get, plan, done, dirs)
		}
	}
}
