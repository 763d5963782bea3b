package xfer

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"time"
)

// end verifies f once all wanted blocks came: every block received or
// kept, the file digest the sender's; then it sets the partial file's mode
// and mtime and renames it to the target. Modes go only on files this
// receiver made.
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
	// All there already (a whole file with the sender's size and mtime):
	// nothing to rename, and the file keeps its mode (it was there before).
	if !f.fromTarget || f.out != nil {
		mtime := time.Unix(0, e.mtime)
		if err := r.open(f); err != nil {
			return fail(pathErr(f.t, f.part, err))
		}
		// the mode and mtime go on the partial file, which this receiver
		// made, before it takes the target's name
		if err := f.out.Truncate(int64(e.size)); err != nil {
			return fail(pathErr(f.t, f.part, err))
		}
		if err := f.out.Chmod(os.FileMode(e.mode)); err != nil {
			return fail(pathErr(f.t, f.part, err))
		}
		err := f.out.Close()
		f.out = nil
		if err != nil {
			return fail(pathErr(f.t, f.part, err))
		}
		if err := f.t.Chtimes(f.part, mtime, mtime); err != nil {
			return fail(pathErr(f.t, f.part, err))
		}
		old := fileSize(f.t, f.target) // the file it replaces, given back once gone
		if err := f.t.Rename(f.part, f.target); err != nil {
			return fail(pathErr(f.t, f.target, err))
		}
		r.quota.replaced(old, f.reserved)
	}
	r.tally.file(int64(e.size), int64(kept))
	r.tally.sent(int64(f.recvd))
	r.obs.event(Event{Kind: EventDone, ID: e.id, Path: e.path, Size: int64(e.size), N: int64(e.size)})
	return ack{id: e.id, ok: true, kept: kept, got: f.recvd}
}

// finishDirs sets the modes and mtimes of the directories made, deepest
// first (a file stored in a directory changes its mtime).
func (r *receiver) finishDirs() {
	sort.SliceStable(r.dirs, func(i, j int) bool {
		return len(r.dirs[i].t.Name(r.dirs[i].name)) > len(r.dirs[j].t.Name(r.dirs[j].name))
	})
	for _, d := range r.dirs {
		r.made.del(d.t.Name(d.name))
		if err := d.t.Chmod(d.name, d.mode); err != nil {
			r.tally.failed(d.name, pathErr(d.t, d.name, err))
			continue
		}
		_ = d.t.Chtimes(d.name, d.mtime, d.mtime)
	}
}

// closeAll closes the files of a session that ended, keeping their
// partial files for a resume.
func (r *receiver) closeAll() {
	for _, f := range r.files {
		if f.out != nil {
			f.out.Close()
		}
		r.busy.release(f.t.Name(f.part))
		// what was not written is given back; what was stays charged
		// (the partial file keeps it for a resume, which charges the rest)
		r.quota.refund(f.reserved - min(f.reserved, f.recvd))
	}
	if r.sub.r != nil {
		r.sub.r.Close()
	}
}

// madeSet is the directories receivers made whose modes and mtimes are not
// set yet (they are set at the end of a session): a session that drops
// leaves them for the next attempt to finish. A directory that is not in
// it was there before, and keeps its mode. It holds at most maxMade
// names; past that, directories stay as made (mode 0700).
type madeSet struct {
	mu sync.Mutex
	m  map[string]bool
}

const maxMade = 1 << 16

func (s *madeSet) add(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]bool{}
	}
	if len(s.m) < maxMade {
		s.m[name] = true
	}
}

func (s *madeSet) has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[name]
}

func (s *madeSet) del(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, name)
}
