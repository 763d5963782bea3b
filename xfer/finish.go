package xfer

import (
	"fmt"
	"os"
	"sort"
	"time"
)

// end verifies f once all wanted blocks came: every block received or
// kept, the file digest the sender's; then it sets mode and mtime and
// renames the partial file to the target.
func (r *receiver) end(f *rfile, digest uint64) ack {
	e := f.e
	fail := func(why string) ack {
		r.drop(f, why)
		r.tally.failed(e.path, f.err)
		r.obs.event(Event{Kind: EventDone, ID: e.id, Path: e.path, Size: int64(e.size), Err: f.err})
		return ack{id: e.id, text: f.err, got: f.recvd}
	}
	if f.err != "" {
		return fail(f.err)
	}
	ds := make([]uint64, len(f.got))
	var kept uint64
	for i := range ds {
		switch {
		case f.gotSet[i]:
			ds[i] = f.got[i]
		case i < len(f.have):
			ds[i] = f.have[i]
			kept += min(uint64(e.block), e.size-uint64(i)*uint64(e.block))
		default:
			return fail(fmt.Sprintf("%s: block %d never arrived", e.path, i))
		}
	}
	if fileDigest(e.size, ds) != digest {
		return fail(fmt.Sprintf("%s: the file's checksum differs from the sender's", e.path))
	}
	mtime := time.Unix(0, e.mtime)
	name := f.part
	if f.fromTarget && f.out == nil {
		name = f.target // all there already: nothing to rename
	} else {
		if err := r.open(f); err != nil {
			return fail(pathErr(r.t, f.part, err))
		}
		if err := f.out.Truncate(int64(e.size)); err != nil {
			return fail(pathErr(r.t, f.part, err))
		}
		err := f.out.Close()
		f.out = nil
		if err != nil {
			return fail(pathErr(r.t, f.part, err))
		}
	}
	if err := r.t.Chmod(name, os.FileMode(e.mode)); err != nil {
		return fail(pathErr(r.t, name, err))
	}
	if err := r.t.Chtimes(name, mtime, mtime); err != nil {
		return fail(pathErr(r.t, name, err))
	}
	if name != f.target {
		if err := r.t.Rename(name, f.target); err != nil {
			return fail(pathErr(r.t, f.target, err))
		}
	}
	r.tally.file(int64(e.size), int64(kept))
	r.tally.sent(int64(f.recvd))
	r.obs.event(Event{Kind: EventDone, ID: e.id, Path: e.path, Size: int64(e.size), N: int64(e.size)})
	return ack{id: e.id, ok: true, kept: kept, got: f.recvd}
}

// finishDirs sets the modes and mtimes of the directories made, deepest
// first (a file stored in a directory changes its mtime).
func (r *receiver) finishDirs() {
	sort.SliceStable(r.dirs, func(i, j int) bool { return len(r.dirs[i].name) > len(r.dirs[j].name) })
	for _, d := range r.dirs {
		if err := r.t.Chmod(d.name, d.mode); err != nil {
			r.tally.failed(d.name, pathErr(r.t, d.name, err))
			continue
		}
		_ = r.t.Chtimes(d.name, d.mtime, d.mtime)
	}
}

// closeAll closes the files of a session that ended, keeping their
// partial files for a resume.
func (r *receiver) closeAll() {
	for _, f := range r.files {
		if f.out != nil {
			f.out.Close()
		}
		r.busy.release(f.part)
	}
}
