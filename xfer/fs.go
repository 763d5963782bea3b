package xfer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gridlink/gridlink/direct"
)

// tree is where one end reads and writes files: a served root (RootTree,
// where no path may leave the root) or the caller's own file system
// (LocalTree). Paths are slash-separated and relative.
type tree interface {
	Open(name string) (*os.File, error)
	OpenFile(name string, flag int, perm os.FileMode) (*os.File, error)
	Stat(name string) (fs.FileInfo, error)
	Lstat(name string) (fs.FileInfo, error)
	ReadDir(name string) ([]fs.DirEntry, error)
	Mkdir(name string, perm os.FileMode) error
	Remove(name string) error
	Rename(from, to string) error
	Chmod(name string, mode os.FileMode) error
	Chtimes(name string, atime, mtime time.Time) error
	// Name is how errors name a path of the tree.
	Name(name string) string
}

// rootTree is a directory tree opened as an os.Root: the served root, or
// where a receiver stores what it is sent. os.Root refuses paths that
// leave it, by "..", or by symbolic links pointing out (also links swapped
// in while a transfer runs). prefix is how errors name the root ("" for
// the served root itself: its paths are named as clients name them); what
// says what it is in an error ("the served root", "the destination").
type rootTree struct {
	r      *os.Root
	prefix string
	what   string
	served bool // a service's: StateFile is not its clients'
}

func servedTree(r *os.Root) rootTree { return rootTree{r: r, what: "the served root", served: true} }

// private says whether name (relative to t) is the service's own: the
// quota state (see StateFile), never served or written for a client.
func private(t tree, name string) bool {
	rt, ok := t.(rootTree)
	return ok && rt.served && reserved(rt.Name(name))
}

func (t rootTree) Open(n string) (*os.File, error) { return t.r.Open(n) }
func (t rootTree) OpenFile(n string, f int, p os.FileMode) (*os.File, error) {
	return t.r.OpenFile(n, f, p)
}
func (t rootTree) Stat(n string) (fs.FileInfo, error)  { return t.r.Stat(n) }
func (t rootTree) Lstat(n string) (fs.FileInfo, error) { return t.r.Lstat(n) }
func (t rootTree) ReadDir(n string) ([]fs.DirEntry, error) {
	return fs.ReadDir(t.r.FS(), path.Clean(n))
}
func (t rootTree) Mkdir(n string, p os.FileMode) error    { return t.r.Mkdir(n, p) }
func (t rootTree) Remove(n string) error                  { return t.r.Remove(n) }
func (t rootTree) Rename(a, b string) error               { return t.r.Rename(a, b) }
func (t rootTree) Chmod(n string, m os.FileMode) error    { return t.r.Chmod(n, m) }
func (t rootTree) Chtimes(n string, a, m time.Time) error { return t.r.Chtimes(n, a, m) }
func (t rootTree) Name(n string) string {
	if t.prefix == "" {
		return n
	}
	return path.Join(t.prefix, n)
}
func (t rootTree) escapes() string { return "escapes " + t.what }

// sub opens the directory name of t as a tree of its own, whose paths
// cannot leave it.
func (t rootTree) sub(name, what string) (rootTree, error) {
	r, err := t.r.OpenRoot(name)
	if err != nil {
		return rootTree{}, err
	}
	return rootTree{r: r, prefix: t.Name(name), what: what, served: t.served}, nil
}

// localTree is the caller's file system, paths relative to dir.
type localTree struct{ dir string }

func (t localTree) p(n string) string               { return filepath.Join(t.dir, filepath.FromSlash(n)) }
func (t localTree) Open(n string) (*os.File, error) { return os.Open(t.p(n)) }
func (t localTree) OpenFile(n string, f int, p os.FileMode) (*os.File, error) {
	return os.OpenFile(t.p(n), f, p)
}
func (t localTree) Stat(n string) (fs.FileInfo, error)      { return os.Stat(t.p(n)) }
func (t localTree) Lstat(n string) (fs.FileInfo, error)     { return os.Lstat(t.p(n)) }
func (t localTree) ReadDir(n string) ([]fs.DirEntry, error) { return os.ReadDir(t.p(n)) }
func (t localTree) Mkdir(n string, p os.FileMode) error     { return os.Mkdir(t.p(n), p) }
func (t localTree) Remove(n string) error                   { return os.Remove(t.p(n)) }
func (t localTree) Rename(a, b string) error                { return os.Rename(t.p(a), t.p(b)) }
func (t localTree) Chmod(n string, m os.FileMode) error     { return os.Chmod(t.p(n), m) }
func (t localTree) Chtimes(n string, a, m time.Time) error  { return os.Chtimes(t.p(n), a, m) }
func (t localTree) Name(n string) string                    { return t.p(n) }

// cleanRel checks a relative, slash-separated path from a peer or a user
// and returns it cleaned: no absolute paths, no "..", no empty names.
// "." (the root itself) is allowed.
func cleanRel(p string) (string, error) {
	switch {
	case p == "":
		return "", errors.New("empty path")
	case strings.HasPrefix(p, "/"):
		return "", fmt.Errorf("%q: absolute path (paths are relative to the served root)", p)
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%q: path escapes the root", p)
	}
	return c, nil
}

// source is one entry a sender offers, with where it reads it.
type source struct {
	e    entry
	name string // in the sender's tree
}

// walk lists what a sender offers for paths (cleaned, relative to t):
// each path's entry named by its base name, and with recursive the trees
// below directories, parents before children. Paths and entries it cannot
// offer come back as failures, each naming the path and the reason.
func walk(t tree, paths []string, recursive bool, top func(string) string) ([]source, []fail) {
	var out []source
	var fails []fail
	id := uint32(0)
	add := func(name, rel string, fi fs.FileInfo) {
		id++
		e := entry{id: id, path: rel, mode: uint32(fi.Mode().Perm()), mtime: fi.ModTime().UnixNano()}
		if fi.IsDir() {
			e.kind = kindDir
		} else {
			e.size = uint64(fi.Size())
			e.block = blockSize(fi.Size())
		}
		out = append(out, source{e: e, name: name})
	}
	var tree func(name, rel string)
	tree = func(name, rel string) {
		des, err := t.ReadDir(name)
		if err != nil {
			fails = append(fails, fail{path: rel, text: pathErr(t, name, err)})
			return
		}
		for _, de := range des {
			n, r := path.Join(name, de.Name()), path.Join(rel, de.Name())
			if private(t, n) || de.Name() == UnfinishedFile {
				continue // the service's own, or a copy's mark: not listed
			}
			if why := controlIn(de.Name()); why != "" {
				fails = append(fails, unsendable(t, n, r, why))
				continue
			}
			fi, err := t.Stat(n)
			switch {
			case err != nil:
				fails = append(fails, fail{path: r, text: pathErr(t, n, err)})
			case fi.IsDir() && de.Type()&fs.ModeSymlink != 0:
				fails = append(fails, fail{path: r, text: t.Name(n) + ": a symbolic link to a directory: not followed"})
			case fi.IsDir():
				add(n, r, fi)
				tree(n, r)
			case fi.Mode().IsRegular():
				add(n, r, fi)
			default:
				fails = append(fails, fail{path: r, text: t.Name(n) + ": not a regular file or directory"})
			}
		}
	}
	for _, p := range paths {
		name, err := cleanRel(p)
		if err != nil {
			fails = append(fails, fail{path: p, text: err.Error()})
			continue
		}
		rel := top(name)
		fi, err := t.Stat(name)
		why := controlIn(rel)
		switch {
		case why != "":
			fails = append(fails, unsendable(t, name, p, why))
		case err != nil:
			fails = append(fails, fail{path: p, text: pathErr(t, name, err)})
		case fi.IsDir() && !recursive:
			fails = append(fails, fail{path: p, text: t.Name(name) + ": a directory (copy it with -r)"})
		case fi.IsDir():
			add(name, rel, fi)
			tree(name, rel)
		case fi.Mode().IsRegular():
			add(name, rel, fi)
		default:
			fails = append(fails, fail{path: p, text: t.Name(name) + ": not a regular file or directory"})
		}
	}
	kept := out[:0]
	for _, s := range out {
		if s.e.kind == kindFile && s.e.block == 0 {
			fails = append(fails, fail{path: s.e.path, text: fmt.Sprintf("%s: %d bytes: too large", t.Name(s.name), s.e.size)})
			continue
		}
		kept = append(kept, s)
	}
	return kept, fails
}

// unsendable is the failure of an entry whose name no receiver stores
// (controlIn says why), quoted so that it stays one line.
func unsendable(t tree, name, rel, why string) fail {
	return fail{path: fmt.Sprintf("%q", rel), text: fmt.Sprintf("%q: %s: not sent (receivers refuse it)", t.Name(name), why)}
}

// errPathEscapes is the error os.Root gives a name that leads out of it.
// The os package does not export it; one look-up that escapes (a root's
// "..") obtains it, so it is matched as an error value, not by its text.
var errPathEscapes = sync.OnceValue(func() error {
	r, err := os.OpenRoot(os.TempDir())
	if err != nil {
		return errors.New("no os.Root escape error") // matches nothing
	}
	defer r.Close()
	_, err = r.Stat("..")
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return errors.New("no os.Root escape error")
})

// pathErr words an error about name in t without repeating the op.
func pathErr(t tree, name string, err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		err = le.Err
	}
	if errors.Is(err, errPathEscapes()) {
		what := "path escapes the served root"
		if rt, ok := t.(rootTree); ok && rt.what != "" {
			what = "path " + rt.escapes() + " (by \"..\" or a symbolic link)"
		}
		return t.Name(name) + ": " + what
	}
	return t.Name(name) + ": " + err.Error()
}

// checkEntryPath checks the name a sender gives an entry: relative,
// slash-separated, every element a name (not "", "." or ".."), so that it
// names a place below the receiver's destination and nothing else, and
// without control characters (controlIn).
func checkEntryPath(p string) error {
	why := ""
	switch {
	case p == "":
		why = "an empty name"
	case strings.HasPrefix(p, "/"):
		why = "an absolute path"
	default:
		for _, el := range strings.Split(p, "/") {
			switch el {
			case "":
				why = "a name with an empty element (a doubled or trailing slash)"
			case ".":
				why = `a name with a "." element (the destination itself, or a name that is not clean)`
			case "..":
				why = `a name with a ".." element (a step out of the destination)`
			}
			if why != "" {
				break
			}
		}
	}
	if why == "" {
		why = controlIn(p)
	}
	if why == "" {
		return nil
	}
	return &UnsafePathError{Path: p, Reason: why}
}

// UnsafePathError is an entry a receiver refused because its name is not
// a clean relative path below the destination: "..", ".", an absolute
// path, an empty element or a trailing slash, or a name with a control
// character. A sender that offers one is
// broken or malicious; the receiver ends the session (mAbort).
type UnsafePathError struct {
	Path   string // the entry's name as the sender gave it
	Reason string
	Dest   bool // Path is a put's destination, which the service would store as named
}

func (e *UnsafePathError) Error() string {
	if e.Dest {
		return fmt.Sprintf("xfer: the put's destination %q is %s: refused, nothing written", e.Path, e.Reason)
	}
	return fmt.Sprintf("xfer: the sender offered an entry named %q, %s: refused, nothing of it written", e.Path, e.Reason)
}

// Unwrap makes it a malformed message, the session ends and is not
// retried, and a refusal (direct.ErrRefused).
func (e *UnsafePathError) Unwrap() []error { return []error{errFrame, direct.ErrRefused} }
