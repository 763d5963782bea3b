package xfer

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/gridlink/gridlink/direct"
)

// The names a receiver takes. Whoever sends, a receiver writes only the
// sources its caller named (scp's CVE-2019-6111 is a client that wrote
// whatever name its server sent): every entry's first element is the
// base name of one of them. A get's client knows them from its own
// request; a service receiving a put learns them from the put's request,
// which announces its sources' base names, and holds the client's
// entries to them (a push's target holds its source to the names the
// source announced).

// asked is what a receiver's caller named.
type asked struct {
	names map[string]bool // the sources' base names
	list  []string        // the same, in the caller's order, for errors
	// root: a get of the served root ("."), whose entries the service
	// names by its root directory's base name, which the client cannot
	// know: the first directory entry of one element that is none of
	// names is taken as it, and from then on that name only.
	root     bool
	rootName string
}

// askedOf is what a get of paths asks for: each path's base name as the
// service cleans it ("." for the served root itself).
func askedOf(paths []string) asked {
	var a asked
	for _, p := range paths {
		if b := path.Base(path.Clean(p)); b == "." || b == "/" {
			a.root = true
		} else {
			a.add(b)
		}
	}
	return a
}

// announced is what a put's request names: its sources' base names,
// each a plain name (see plainName; decodeRequest refuses a request that
// names none).
func announced(names []string) (asked, error) {
	var a asked
	for _, n := range names {
		if why := plainName(n); why != "" {
			return asked{}, &SourceNameError{Name: n, Reason: why}
		}
		a.add(n)
	}
	return a, nil
}

func (a *asked) add(n string) {
	if a.names == nil {
		a.names = map[string]bool{}
	}
	if !a.names[n] {
		a.names[n] = true
		a.list = append(a.list, n)
	}
}

// take checks an entry (its name already checked by checkEntryPath):
// its first element must be a name asked for.
func (a *asked) take(e entry) error {
	first, _, below := strings.Cut(e.path, "/")
	switch {
	case a.names[first], a.root && first == a.rootName:
		return nil
	case a.root && a.rootName == "" && !below && e.kind == kindDir:
		a.rootName = first
		return nil
	}
	return &UnaskedError{Path: e.path, Asked: a.list, Root: a.root}
}

// UnaskedError is an entry a receiver refused because its first element
// names no source its caller asked for: a service that sent a name of its
// choosing to a get, or a client (or a push's source) that offered one
// its put did not announce. The sender is broken or malicious; the
// receiver ends the session (mAbort) and writes nothing of it.
type UnaskedError struct {
	Path  string   // the entry's name as the sender gave it
	Asked []string // the sources' base names the caller named
	Root  bool     // the caller also asked for the served root, by the name the service gives it first
}

func (e *UnaskedError) Error() string {
	var qs []string
	for i, n := range e.Asked {
		if i == 8 {
			qs = append(qs, fmt.Sprintf("%d more", len(e.Asked)-i))
			break
		}
		qs = append(qs, fmt.Sprintf("%q", n))
	}
	if e.Root {
		qs = append(qs, "the served root (by the name of its first directory)")
	}
	return fmt.Sprintf("xfer: the sender offered an entry named %q, but the copy asked for %s: refused, nothing of it written",
		e.Path, strings.Join(qs, ", "))
}

// Unwrap makes it a malformed message, the session ends and is not
// retried, and a refusal (direct.ErrRefused).
func (e *UnaskedError) Unwrap() []error { return []error{errFrame, direct.ErrRefused} }

// SourceNameError is a put whose request names a source by something
// other than a plain name: refused before anything flows.
type SourceNameError struct {
	Name   string
	Reason string
}

func (e *SourceNameError) Error() string {
	return fmt.Sprintf("xfer: a put names its source %q, %s: refused", e.Name, e.Reason)
}

// Unwrap makes it one of the refusal family (direct.ErrRefused).
func (e *SourceNameError) Unwrap() error { return direct.ErrRefused }

// plainName says why n is not a plain name, one element of an entry's
// path ("" if it is one).
func plainName(n string) string {
	var ue *UnsafePathError
	if errors.As(checkEntryPath(n), &ue) {
		return ue.Reason
	}
	if strings.Contains(n, "/") {
		return "a name with a slash (a source is named by its base name)"
	}
	return ""
}

// controlIn says why a name holds a character no receiver stores ("" if
// it holds none): a control character (bytes below 0x20, and 0x7f: a
// newline in a name breaks every line-based tool and log that lists it),
// or bytes that are not UTF-8.
func controlIn(n string) string {
	if !utf8.ValidString(n) {
		return "a name that is not UTF-8"
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; c < 0x20 || c == 0x7f {
			return fmt.Sprintf("a name with the control character 0x%02x", c)
		}
	}
	return ""
}

// sourceNames is what a put of paths (of a sender's tree) announces: the
// base names its entries will have (top), each once. A path the sender
// cannot name so is left out: walk fails it alone. None left, or more
// than a request holds, is an error.
func sourceNames(paths []string, top func(string) string) ([]string, error) {
	var a asked
	var bad error
	for _, p := range paths {
		c, err := cleanRel(p)
		if err != nil {
			continue
		}
		n := top(c)
		if why := plainName(n); why != "" {
			if bad == nil {
				bad = &SourceNameError{Name: n, Reason: why}
			}
			continue
		}
		a.add(n)
	}
	switch {
	case len(a.list) == 0 && bad != nil:
		return nil, bad
	case len(a.list) > maxPaths:
		return nil, fmt.Errorf("xfer: %d sources of different names: a copy takes at most %d; copy their directory, or in parts", len(a.list), maxPaths)
	}
	return a.list, nil
}
