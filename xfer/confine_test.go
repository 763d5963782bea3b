package xfer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
)

// victim is a home directory a client copies into: a .bashrc beside the
// destination, a directory outside it, and modes to watch.
type victim struct {
	t                   *testing.T
	top, home, outside  string
	bashrc, exist, file string
}

func newVictim(t *testing.T) *victim {
	v := &victim{t: t, top: t.TempDir()}
	v.home = filepath.Join(v.top, "home")
	v.outside = filepath.Join(v.top, "outside")
	v.bashrc = filepath.Join(v.home, ".bashrc")
	v.exist = filepath.Join(v.home, "exist")
	v.file = filepath.Join(v.home, "exist.txt")
	for _, d := range []string{v.home, v.outside, v.exist} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{v.bashrc, v.file} {
		if err := os.WriteFile(f, []byte("original\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// modes records the mode of every file and directory of the victim's
// tree, except those under skip.
func (v *victim) modes(skip string) map[string]fs.FileMode {
	m := map[string]fs.FileMode{}
	filepath.WalkDir(v.top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if p == skip {
			return filepath.SkipDir
		}
		if fi, err := os.Lstat(p); err == nil {
			m[p] = fi.Mode()
		}
		return nil
	})
	return m
}

// unharmed fails unless nothing outside dest was written or changed mode:
// the tree is as before (only under dest may things differ), .bashrc
// holds what it held, and nothing is in outside.
func (v *victim) unharmed(what, dest string, before map[string]fs.FileMode) {
	t := v.t
	t.Helper()
	after := v.modes(dest)
	for p, m := range after {
		if b, ok := before[p]; !ok {
			t.Errorf("%s: %s appeared outside the destination", what, p)
		} else if b != m {
			t.Errorf("%s: %s changed mode from %v to %v", what, p, b, m)
		}
	}
	if b, _ := os.ReadFile(v.bashrc); string(b) != "original\n" {
		t.Errorf("%s: .bashrc now holds %q", what, b)
	}
	if des, _ := os.ReadDir(v.outside); len(des) != 0 {
		t.Errorf("%s: %d entries written outside", what, len(des))
	}
}

// A malicious transfer service sends entries that name places outside the
// client's destination: "..", ".", absolute paths, and a symbolic link
// swapped in under a directory the client made. Into a new and an
// existing destination, one file and trees: the client writes nothing
// outside it, changes no mode outside what it made, and its error names
// the entry; the service hears why.
func TestEvilServiceStaysInDestination(t *testing.T) {
	file, dir := evilFile, evilDir
	for _, c := range []struct {
		name      string
		dest      func(v *victim) string // the destination the caller names
		recursive bool
		entries   func(v *victim) []evilEntry
		bad       string // the entry the error must name ("": the last one offered)
		unsafe    bool   // refused as a bad name (UnsafePathError), else refused by os.Root
	}{
		{name: "file new dotdot", dest: func(v *victim) string { return filepath.Join(v.home, "out.txt") },
			entries: func(v *victim) []evilEntry { return []evilEntry{file("x/../.bashrc")} }, unsafe: true},
		{name: "file existing dotdot", dest: func(v *victim) string { return v.file },
			entries: func(v *victim) []evilEntry { return []evilEntry{file("x/../.bashrc")} }, unsafe: true},
		{name: "file new absolute", dest: func(v *victim) string { return filepath.Join(v.home, "out.txt") },
			entries: func(v *victim) []evilEntry { return []evilEntry{file(v.bashrc)} }, unsafe: true},
		{name: "file new dot", dest: func(v *victim) string { return filepath.Join(v.home, "out.txt") },
			entries: func(v *victim) []evilEntry { return []evilEntry{dir(".")} }, unsafe: true},
		{name: "file into existing dir dot", dest: func(v *victim) string { return v.exist },
			entries: func(v *victim) []evilEntry { return []evilEntry{dir(".")} }, unsafe: true},
		{name: "file new a tree instead", dest: func(v *victim) string { return filepath.Join(v.home, "out.txt") },
			entries: func(v *victim) []evilEntry { return []evilEntry{dir("x"), file("x/.bashrc")} }, bad: "x", unsafe: true},
		{name: "file into existing dir a name below", dest: func(v *victim) string { return v.exist },
			entries: func(v *victim) []evilEntry { return []evilEntry{file("x/y")} }, unsafe: true},
		{name: "tree new dotdot dir", dest: func(v *victim) string { return filepath.Join(v.home, "newdir") }, recursive: true,
			entries: func(v *victim) []evilEntry { return []evilEntry{dir("d"), dir("d/..")} }, unsafe: true},
		{name: "tree new dotdot file", dest: func(v *victim) string { return filepath.Join(v.home, "newdir") }, recursive: true,
			entries: func(v *victim) []evilEntry { return []evilEntry{dir("d"), file("d/../.bashrc")} }, unsafe: true},
		{name: "tree new dotdot inside", dest: func(v *victim) string { return filepath.Join(v.home, "newdir") }, recursive: true,
			entries: func(v *victim) []evilEntry { return []evilEntry{dir("d"), file("d/../x")} }, unsafe: true},
		{name: "tree existing dot", dest: func(v *victim) string { return v.exist }, recursive: true,
			entries: func(v *victim) []evilEntry { return []evilEntry{dir(".")} }, unsafe: true},
		{name: "tree existing dotdot to dot", dest: func(v *victim) string { return v.exist }, recursive: true,
			entries: func(v *victim) []evilEntry { return []evilEntry{dir("d/..")} }, unsafe: true},
		{name: "tree existing trailing slash", dest: func(v *victim) string { return v.exist }, recursive: true,
			entries: func(v *victim) []evilEntry { return []evilEntry{dir("d/")} }, unsafe: true},
		{name: "tree existing symlink out", dest: func(v *victim) string {
			os.Symlink(v.outside, filepath.Join(v.exist, "d"))
			return v.exist
		}, recursive: true,
			entries: func(v *victim) []evilEntry { return []evilEntry{dir("d"), file("d/f")} }, bad: "exist/d"},
		{name: "tree new symlink swapped in", dest: func(v *victim) string { return filepath.Join(v.home, "newdir") }, recursive: true,
			entries: func(v *victim) []evilEntry {
				sub := filepath.Join(v.home, "newdir", "sub")
				swap := func() {
					os.Remove(sub)
					os.Symlink("../../outside", sub)
				}
				return []evilEntry{dir("d"), dir("d/sub"), {kind: kindFile, path: "d/sub/f", mode: 0o644, data: []byte("x"), before: swap}}
			}, bad: "newdir/sub"},
		{name: "tree new symlink swapped in to parent", dest: func(v *victim) string { return filepath.Join(v.home, "newdir") }, recursive: true,
			entries: func(v *victim) []evilEntry {
				sub := filepath.Join(v.home, "newdir", "sub")
				swap := func() {
					os.Remove(sub)
					os.Symlink("..", sub)
				}
				return []evilEntry{dir("d"), dir("d/sub"), {kind: kindFile, path: "d/sub/.bashrc", mode: 0o644, data: []byte("x"), before: swap}}
			}, bad: "newdir/sub"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newVictim(t)
			dest := c.dest(v)
			es := c.entries(v)
			if c.bad == "" {
				c.bad = es[len(es)-1].path
			}
			before := v.modes(dest)
			dial, heard := evilService(t, es)
			// asking for what the entries are named: their form is refused
			sum, err := Get(ctx, dial, firstNames(es), dest, Options{Recursive: c.recursive, Retries: -1})
			v.unharmed(c.name, dest, before)
			said := <-heard
			var ue *UnsafePathError
			switch {
			case c.unsafe && (!errors.As(err, &ue) || ue.Path != c.bad || !strings.Contains(err.Error(), c.bad)):
				t.Errorf("get: %v (%+v), want an unsafe-path error naming %q", err, sum, c.bad)
			case !c.unsafe && (err != nil || sum.Failed == 0 || !strings.Contains(sum.Errors[0].Error, c.bad)):
				t.Errorf("get: %v, %+v; want the entry refused, naming %q", err, sum, c.bad)
			}
			if len(said) == 0 || !strings.Contains(said[len(said)-1], c.bad) {
				t.Errorf("the sender heard %q, want the reason, naming %q", said, c.bad)
			}
		})
	}
}

// A malicious client puts entries that name the served root itself or
// places beside its destination: the service refuses, says why in words
// and in its log, and the root's mode never changes.
func TestEvilClientStaysInDestination(t *testing.T) {
	top := t.TempDir()
	root := filepath.Join(top, "root")
	os.Mkdir(root, 0o755)
	os.Mkdir(filepath.Join(root, "sub"), 0o755)
	os.Mkdir(filepath.Join(root, "other"), 0o755)
	os.Mkdir(filepath.Join(top, "outside"), 0o755)
	os.Symlink("../other", filepath.Join(root, "sub", "in"))           // in the root, not in sub
	os.Symlink("../../outside", filepath.Join(root, "sub", "out"))     // out of the root
	os.Symlink("../../outside", filepath.Join(root, "sub", "outfile")) // a file's name
	os.WriteFile(filepath.Join(root, "keep"), []byte("original\n"), 0o644)
	os.WriteFile(filepath.Join(root, "sub/keep"), []byte("original\n"), 0o644)
	var logs logLines
	dial, _ := service(t, Config{Root: root, Logf: logs.add})
	file, dir := evilFile, evilDir
	for _, c := range []struct {
		name    string
		dest    string
		flags   uint8
		entries []evilEntry
		bad     string
	}{
		{"dot into the root", ".", flagInto, []evilEntry{dir(".")}, "."},
		{"dotdot into the root", ".", flagInto, []evilEntry{dir("x/..")}, "x/.."},
		{"as the root", ".", flagAs, []evilEntry{dir("x")}, "cannot take the served root's place"},
		{"dot as a new dir", "new", flagAs, []evilEntry{dir(".")}, "."},
		{"beside the destination", "sub/f", flagAs, []evilEntry{file("x/../keep")}, "x/../keep"},
		{"beside a directory", "sub", flagInto, []evilEntry{file("x/../../keep")}, "x/../../keep"},
		{"absolute", "sub", flagInto, []evilEntry{file("/keep")}, "/keep"},
		{"through a link beside the destination", "sub", flagInto, []evilEntry{dir("in"), file("in/f")}, "sub/in: path escapes the destination"},
		{"through a link out of the root", "sub", flagInto, []evilEntry{dir("out"), file("out/f")}, "sub/out: path escapes the destination"},
		{"a tree as a link beside the destination", "sub/in", flagAs, []evilEntry{dir("x"), file("x/f")}, "sub/in"},
	} {
		n := len(logs.all())
		said := evilPut(t, dial, c.dest, c.flags, firstNames(c.entries), c.entries)
		if len(said) == 0 || !strings.Contains(said[len(said)-1], c.bad) {
			t.Errorf("%s: the client heard %q, want the reason naming %q", c.name, said, c.bad)
		}
		if fi, _ := os.Stat(root); fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: the served root's mode is %v", c.name, fi.Mode())
			os.Chmod(root, 0o755)
		}
		if fi, _ := os.Stat(filepath.Join(root, "sub")); fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: sub's mode is %v", c.name, fi.Mode())
			os.Chmod(filepath.Join(root, "sub"), 0o755)
		}
		if b, _ := os.ReadFile(filepath.Join(root, "keep")); string(b) != "original\n" {
			t.Errorf("%s: keep holds %q", c.name, b)
			os.WriteFile(filepath.Join(root, "keep"), []byte("original\n"), 0o644)
			os.WriteFile(filepath.Join(root, "sub/keep"), []byte("original\n"), 0o644)
		}
		if des, _ := os.ReadDir(top); len(des) != 2 {
			t.Errorf("%s: %d entries beside the served root", c.name, len(des))
		}
		for _, d := range []string{filepath.Join(top, "outside"), filepath.Join(root, "other")} {
			if des, _ := os.ReadDir(d); len(des) != 0 {
				t.Errorf("%s: %s was written", c.name, d)
			}
			if fi, _ := os.Stat(d); fi.Mode().Perm() != 0o755 {
				t.Errorf("%s: %s's mode is %v", c.name, d, fi.Mode())
				os.Chmod(d, 0o755)
			}
		}
		logs.wait(t, n, c.bad)
	}
}

// logLines collects a service's log.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(f string, a ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(f, a...))
	l.mu.Unlock()
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// wait waits (5 s at most) for a line with s after the first n, and
// fails the test naming s and showing those lines if none comes.
func (l *logLines) wait(t *testing.T, n int, s string) {
	t.Helper()
	defer func() {
		if t.Failed() {
			t.Logf("the service's log after line %d: %q", n, l.all()[n:])
		}
	}()
	testwait.Until(t, fmt.Sprintf("the service's log to say %q", s), 5*time.Second, func() bool {
		for _, line := range l.all()[n:] {
			if strings.Contains(line, s) {
				return true
			}
		}
		return false
	})
}
