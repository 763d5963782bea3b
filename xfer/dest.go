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
}

func (d destination) close() { d.t.r.Close() }

// openDest opens the destination dest of t with placement place.
func openDest(t rootTree, dest string, place uint8) (destination, error) {
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
	return destination{t: d, base: path.Base(dest), place: placeAs}, nil
}

// localDest opens the destination d, an absolute path of this host.
func localDest(d string) (destination, error) {
	place, err := placement(localTree{dir: "/"}, strings.TrimPrefix(d, "/"))
	if err != nil {
		return destination{}, err
	}
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
	return destination{t: t, base: filepath.Base(d), place: placeAs}, nil
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
