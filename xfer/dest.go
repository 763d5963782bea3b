package xfer

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// destination is where a receiver stores entries: placeInto puts
// SOURCE/REST at SOURCE/REST of t (the destination directory); placeAs
// puts SOURCE at base in t (the directory the destination is in) and
// SOURCE/REST at REST below it.
type destination struct {
	t     rootTree
	base  string
	place uint8
	// recursive: the caller asked for trees (-r). Without it, an entry is
	// one file named by one element: a directory, or a name below one, is
	// refused as unsafe.
	recursive bool
	// asked: the sources the caller named; every entry's first element
	// is one of their names (names.go)
	asked asked
	// unfinished (placeAs): base is a directory an earlier copy made as
	// the destination itself and did not finish (its UnfinishedFile names
	// that copy's source, this one); a resumed copy continues it there.
	unfinished string
}

// UnfinishedFile marks a directory that a copy made to take its one
// source's place (scp's "cp -r SRC NEW": NEW is SRC's copy) until that
// copy finishes: it holds the source's name. Without it a resumed copy
// would find NEW existing and, by scp's rules, copy SRC into NEW/SRC
// anew. A copy with --resume into a directory holding it for the same
// source continues that copy in the directory (placeAs); the copy that
// completes without failures removes it. A receiver never takes an
// entry of this name from a sender, and a sender does not offer one.
const UnfinishedFile = ".gridlink-unfinished"

// resumed decides the placement of a resumed copy: into the existing
// directory dest (placeInto, scp's rule) unless dest holds the
// UnfinishedFile of an earlier copy that took its place (placeAs). It
// returns that copy's source name ("" for none).
func resumed(t tree, dest string, place uint8, resume bool) (uint8, string) {
	if !resume {
		return place, ""
	}
	top := unfinishedIn(t, dest)
	if top == "" {
		return place, ""
	}
	return placeAs, top
}

// unfinishedIn reads the source name of dir's UnfinishedFile ("" if it
// has none, or one that is not a plain name).
func unfinishedIn(t tree, dir string) string {
	f, err := t.Open(path.Join(dir, UnfinishedFile))
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, 512)
	n, _ := io.ReadFull(f, b)
	name := strings.TrimSuffix(string(b[:n]), "\n")
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00\n") {
		return ""
	}
	return name
}

func (d destination) close() { d.t.r.Close() }

// openDest opens the destination dest of t with placement place (top:
// see destination.unfinished).
func openDest(t rootTree, dest string, place uint8, top string) (destination, error) {
	if place == placeInto {
		d, err := t.sub(dest, "the destination")
		if err != nil {
			return destination{}, errors.New(pathErr(t, dest, err))
		}
		return destination{t: d, place: placeInto}, nil
	}
	if path.Base(dest) == "." || path.Base(dest) == ".." || path.Base(dest) == "/" {
		return destination{}, fmt.Errorf("%s: a copy cannot take the served root's place", t.Name(dest))
	}
	dir := path.Dir(dest)
	d, err := t.sub(dir, "the destination's directory")
	if err != nil {
		return destination{}, errors.New(pathErr(t, dir, err))
	}
	return destination{t: d, base: path.Base(dest), place: placeAs, unfinished: top}, nil
}

// localDest opens the destination d, an absolute path of this host
// (resume: as a resumed copy, see resumed).
func localDest(d string, resume bool) (destination, error) {
	lt, rel := localTree{dir: "/"}, strings.TrimPrefix(d, "/")
	place, err := placement(lt, rel)
	if err != nil {
		return destination{}, err
	}
	place, top := resumed(lt, rel, place, resume)
	dir := d
	if place == placeAs {
		dir = filepath.Dir(d)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return destination{}, err
	}
	t := rootTree{r: r, prefix: dir, what: "the destination"}
	if place == placeInto {
		return destination{t: t, place: placeInto}, nil
	}
	t.what = "the destination's directory"
	return destination{t: t, base: filepath.Base(d), place: placeAs, unfinished: top}, nil
}

// abortLinger bounds how long an end that aborted a session waits for the
// other to read why and close.
const abortLinger = 5 * time.Second

// abort ends a session for a reason of this end's: it tells the other end
// in words (mAbort), then reads and drops what still comes until the other
// end closes (or abortLinger), so that it reads the reason rather than a
// reset connection.
func abort(ep *endpoint, err error) {
	if ep.sendNow(mAbort, enc(nil).str(err.Error())) != nil {
		return
	}
	_ = ep.c.SetReadDeadline(time.Now().Add(abortLinger))
	_, _ = io.Copy(io.Discard, ep.r)
}

// refusal marks an error of a session as this end's refusal (not the
// connection's failure): the other end is told (abort).
type refusal struct{ err error }

func (r refusal) Error() string { return r.err.Error() }
func (r refusal) Unwrap() error { return r.err }

// UnfinishedError refuses a resumed copy of one source into a directory
// holding the unfinished copy of another (see UnfinishedFile): which of
// them the directory is meant to hold is not for the receiver to guess.
type UnfinishedError struct {
	Dir    string // the directory
	Source string // the source its unfinished copy is of
	Offer  string // the source this copy offers
}

func (e *UnfinishedError) Error() string {
	return fmt.Sprintf("%s holds the unfinished copy of %s (%s), not of %s: resume that copy, remove the directory, or copy without --resume (into it, by scp's rules)",
		e.Dir, e.Source, UnfinishedFile, e.Offer)
}

// unfinishedNote says, for a copy into the existing directory dir by
// scp's rules, where an earlier copy that took dir's place was left
// unfinished ("" if none was).
func unfinishedNote(t tree, dir string) string {
	top := unfinishedIn(t, dir)
	if top == "" {
		return ""
	}
	return fmt.Sprintf("note: %s holds an unfinished copy of %s (see its %s and .NAME%s files): this copy goes into it by scp's rules; --resume would continue that copy instead",
		t.Name(dir), top, UnfinishedFile, partSuffix)
}

// mark writes the UnfinishedFile of the directory r made to take the
// source top's place (best effort: without it, a resume after a crash
// copies into the directory by scp's rules).
func (r *receiver) mark(top string) {
	f, err := r.sub.OpenFile(UnfinishedFile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return
	}
	_, err = f.WriteString(top + "\n")
	if f.Close() == nil && err == nil {
		r.marked = true
	}
}

// unmark removes the mark once the copy is complete: kept while entries
// failed, so that a resume continues it.
func (r *receiver) unmark() {
	if r.marked && r.tally.summary().Failed == 0 {
		_ = r.sub.Remove(UnfinishedFile)
	}
}
