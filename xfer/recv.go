package xfer

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"
)

// partSuffix ends the temporary name a file is written under until it is
// verified: DIR/.NAME.gridlink-part for DIR/NAME. A resumed transfer
// starts from it; nothing ever takes it for the file.
const partSuffix = ".gridlink-part"

// receiver stores what a sender offers in its destination. Every entry
// name is checked (checkEntryPath), its first element against the names
// of the sources asked for (destination.asked), and every file written through an
// os.Root: the destination directory, or for placeAs the directory that
// holds the destination, in which the one name base is all it touches
// (and below it, through a root of its own, once it is a directory).
type receiver struct {
	ep     *endpoint
	d      destination
	sub    rootTree // placeAs: d.base as a tree, once it is a directory
	resume bool
	obs    *observer
	tally  *tally
	quota  *charge

	files map[uint32]*rfile
	busy  *busySet
	owner string // the session's user (busySet)
	made  *madeSet
	top   string // placeAs: the one source's name
	dirs  []dirMeta
	// ours (placeAs): the directory taking the source's place is this
	// copy's (made by it, or by the unfinished copy it continues); marked:
	// its UnfinishedFile is written, and goes once the copy completes
	ours, marked bool
}

type dirMeta struct {
	t     rootTree
	name  string
	mode  os.FileMode
	mtime time.Time
}

// rfile is a file being received.
type rfile struct {
	e          entry
	t          rootTree // the tree target and part are in
	target     string
	part       string
	have       []uint64 // digests of what the receiver had
	fromTarget bool     // have describes target itself (a whole file already there)
	got        []uint64 // digests of blocks received; 0 with gotSet false: none
	gotSet     []bool
	out        *os.File
	recvd      uint64
	reserved   uint64 // bytes charged to the quota for it
	err        string // set once the file failed; its data is then dropped
}

// placement decides how entries map to files under dest: into it if it is
// a directory, else as it (if it does not exist, or is a file).
func placement(t tree, dest string) (uint8, error) {
	fi, err := t.Stat(dest)
	switch {
	case err == nil && fi.IsDir():
		return placeInto, nil
	case err == nil || errors.Is(err, fs.ErrNotExist):
		return placeAs, nil
	}
	return 0, errors.New(pathErr(t, dest, err))
}

// receive runs a receiving session until the sender's bye.
// Files being written are marked in busy (shared by the sessions of a
// service; nil for a session of its own); directories made and not yet
// finished in made (shared by the attempts of a transfer, and the
// sessions of a service; nil: this session's own).
//
// owner is the session's user: a resumed session (resume) takes over the
// files another of the same owner still writes (busySet).
func receive(ep *endpoint, d destination, resume bool, busy *busySet, made *madeSet, q *charge, obs *observer, tl *tally, owner string) error {
	if busy == nil {
		busy = &busySet{}
	}
	if made == nil {
		made = &madeSet{}
	}
	r := &receiver{ep: ep, d: d, resume: resume, busy: busy, made: made, quota: q, obs: obs, tally: tl, files: map[uint32]*rfile{}, owner: owner}
	defer r.closeAll()
	err := r.run()
	var re refusal
	if errors.As(err, &re) {
		abort(ep, re.err)
		return re.err
	}
	return err
}

func (r *receiver) run() error {
	ep := r.ep
	for {
		typ, p, err := ep.recv()
		if err != nil {
			return err
		}
		switch typ {
		case mPlan:
			files, size, err := decodePlan(p)
			if err != nil {
				return refusal{err}
			}
			var old uint64 // the file a one-file put replaces
			if r.d.place == placeAs {
				old = fileSize(r.d.t, r.d.base)
			}
			if err := r.quota.plan(size, r.resume, old); err != nil {
				return refusal{err}
			}
			if !r.resume {
				if err := fits(r.d.t, ".", size, ""); err != nil {
					return refusal{err}
				}
			}
			r.obs.event(Event{Kind: EventPlan, N: int64(files), Size: int64(size)})
		case mFile:
			e, err := decodeEntry(p)
			if err != nil {
				return refusal{err}
			}
			if !r.d.recursive && e.kind == kindDir {
				return refusal{&UnsafePathError{Path: e.path, Reason: "a directory, in a copy without -r"}}
			}
			if !r.d.recursive && strings.Contains(e.path, "/") {
				return refusal{&UnsafePathError{Path: e.path, Reason: "a name below a directory, in a copy without -r"}}
			}
			if err := r.d.asked.take(e); err != nil {
				return refusal{err}
			}
			if r.files[e.id] != nil {
				return refusal{fmt.Errorf("xfer: entry %d offered twice", e.id)}
			}
			w, err := r.offered(e)
			if err != nil {
				return refusal{err}
			}
			if err := ep.send(mWant, w.encode()); err != nil {
				return err
			}
		case mData:
			b, err := decodeBlock(p)
			if err != nil {
				return refusal{err}
			}
			if err := r.data(b); err != nil {
				return refusal{err}
			}
		case mEnd:
			e, err := decodeEnd(p)
			if err != nil {
				return refusal{err}
			}
			f := r.files[e.id]
			if f == nil || f.got == nil {
				return refusal{fmt.Errorf("xfer: the end of entry %d, never asked for", e.id)}
			}
			a := r.end(f, e.digest)
			r.busy.release(f.t.Name(f.part))
			delete(r.files, e.id)
			if err := ep.send(mAck, a.encode()); err != nil {
				return err
			}
		case mFail:
			fl, err := decodeFail(p)
			if err != nil {
				return refusal{err}
			}
			if f := r.files[fl.id]; fl.id != 0 {
				if f == nil || f.got == nil {
					return refusal{fmt.Errorf("xfer: a failure of entry %d, never asked for", fl.id)}
				}
				r.drop(f, "")
				r.busy.release(f.t.Name(f.part))
				delete(r.files, fl.id)
			}
			r.tally.fail(FileError{Path: fl.path, Error: fl.text, Changed: fl.changed})
			r.obs.event(Event{Kind: EventDone, ID: fl.id, Path: fl.path, Err: fl.text})
		case mBye:
			r.unmark()
			r.finishDirs()
			return ep.sendNow(mBye)
		case mAbort:
			why, err := decodeText(p)
			if err != nil {
				return err
			}
			return &RefusedError{"the sender gave up: " + why}
		default:
			return refusal{fmt.Errorf("%w: message %d from a sender", errFrame, typ)}
		}
	}
}

// locate maps an entry path to the tree and name it is stored as; top
// says it is placeAs's destination itself.
func (r *receiver) locate(p string) (t rootTree, name string, top bool, err error) {
	if r.d.place == placeInto {
		return r.d.t, p, false, nil
	}
	first, rest, _ := strings.Cut(p, "/")
	if r.top == "" {
		if u := r.d.unfinished; u != "" && first != u {
			return rootTree{}, "", false, &UnfinishedError{Dir: r.d.t.Name(r.d.base), Source: u, Offer: first}
		}
		r.top = first
	}
	if first != r.top {
		return rootTree{}, "", false, fmt.Errorf("%s: not a directory, and there are several sources", r.d.t.Name(r.d.base))
	}
	if rest == "" {
		return r.d.t, r.d.base, true, nil
	}
	if r.sub.r == nil {
		return rootTree{}, "", false, fmt.Errorf("%s: not a directory (%s came first)", r.d.t.Name(r.d.base), first)
	}
	return r.sub, rest, false, nil
}

// offered answers an entry: makes a directory, or looks at what is there
// of a file. Its error ends the session (a quota exceeded).
func (r *receiver) offered(e entry) (want, error) {
	w := want{id: e.id}
	refuse := func(why string) (want, error) {
		r.tally.failed(e.path, why)
		r.obs.event(Event{Kind: EventDone, ID: e.id, Path: e.path, Size: int64(e.size), Err: why})
		return want{id: e.id, status: wantError, text: why}, nil
	}
	t, name, top, err := r.locate(e.path)
	var ue *UnfinishedError
	if errors.As(err, &ue) {
		return want{}, err
	}
	if err != nil {
		return refuse(err.Error())
	}
	if private(t, name) {
		return refuse((&ReservedPathError{Path: t.Name(name)}).Error())
	}
	if path.Base(name) == UnfinishedFile {
		return refuse(t.Name(name) + ": reserved for marking an unfinished copy (" + UnfinishedFile + "): not written")
	}
	if e.kind == kindDir {
		return r.dir(e, t, name, top, refuse)
	}
	if dir := path.Dir(name); dir != "." {
		if fi, err := t.Stat(dir); err != nil {
			return refuse(pathErr(t, dir, err))
		} else if !fi.IsDir() {
			return refuse(t.Name(dir) + ": not a directory")
		}
	}
	if fi, err := t.Lstat(name); err == nil && fi.IsDir() {
		return refuse(t.Name(name) + ": a directory is in the way")
	}
	f := &rfile{e: e, t: t, target: name, part: path.Join(path.Dir(name), "."+path.Base(name)+partSuffix)}
	if !r.busy.acquire(t.Name(f.part), r.owner, r.resume, r.stop) {
		return refuse(t.Name(name) + ": another transfer is writing it")
	}
	n := blocks(e.size, e.block)
	if r.resume {
		if have, err := r.digests(t, f.part, e, n); err == nil {
			f.have = have
		} else if fi, err := t.Lstat(name); err == nil && fi.Mode().IsRegular() && fi.Size() == int64(e.size) && fi.ModTime().UnixNano() == e.mtime {
			if have, err := r.digests(t, name, e, n); err == nil {
				f.have, f.fromTarget = have, true
			}
		}
	} else if fi, err := t.Lstat(f.part); err == nil && fi.Mode().IsRegular() {
		if t.Remove(f.part) == nil {
			r.quota.freed(fi.Size())
		}
	}
	if err := r.reserve(f); err != nil {
		r.busy.release(t.Name(f.part))
		return want{}, err
	}
	f.got, f.gotSet = make([]uint64, n), make([]bool, n)
	r.files[e.id] = f
	r.obs.event(Event{Kind: EventStart, ID: e.id, Path: e.path, Size: int64(e.size)})
	w.have = f.have
	return w, nil
}

// dir makes a directory, or takes one that is there. Only one it made
// (in this session, or an earlier attempt) gets the sender's mode and
// mtime, at the end: a directory that was there keeps its own.
func (r *receiver) dir(e entry, t rootTree, name string, top bool, refuse func(string) (want, error)) (want, error) {
	made := false
	if err := t.Mkdir(name, 0o700); err == nil {
		made = true
	} else {
		fi, serr := t.Stat(name)
		switch {
		case !errors.Is(err, fs.ErrExist):
			return refuse(pathErr(t, name, err))
		case serr != nil:
			return refuse(pathErr(t, name, serr))
		case !fi.IsDir():
			return refuse(t.Name(name) + ": not a directory")
		}
	}
	key := t.Name(name)
	// an unfinished copy's top directory is this copy's, and so is every
	// directory below one that is
	if made || top && r.d.unfinished != "" || !top && r.ours {
		r.made.add(key)
		made = true
	} else {
		made = r.made.has(key)
	}
	if top && made {
		r.ours = true
	}
	if top && r.sub.r == nil {
		sub, err := t.sub(name, "the destination")
		if err != nil {
			return refuse(pathErr(t, name, err))
		}
		r.sub = sub
	}
	if top && made {
		r.mark(e.path)
	}
	if made {
		r.dirs = append(r.dirs, dirMeta{t, name, os.FileMode(e.mode), time.Unix(0, e.mtime)})
	}
	r.tally.dir()
	r.obs.event(Event{Kind: EventDir, ID: e.id, Path: e.path})
	return want{id: e.id, status: wantSkip}, nil
}

// digests reads name block by block (at most n blocks) and returns their
// digests.
func (r *receiver) digests(t rootTree, name string, e entry, n int) ([]uint64, error) {
	in, err := t.Open(name)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	buf := make([]byte, e.block)
	var ds []uint64
	for len(ds) < n {
		k, err := io.ReadFull(in, buf)
		if k > 0 {
			ds = append(ds, blockDigest(buf[:k]))
		}
		if err != nil {
			break
		}
	}
	return ds, nil
}

// data stores a block.
func (r *receiver) data(b block) error {
	f := r.files[b.id]
	if f == nil || f.got == nil {
		return fmt.Errorf("xfer: data for entry %d, never asked for", b.id)
	}
	e := f.e
	if b.offset%uint64(e.block) != 0 || b.offset >= e.size || uint64(len(b.data)) != min(uint64(e.block), e.size-b.offset) {
		return fmt.Errorf("xfer: a block of %d bytes at offset %d of %s (%d bytes, blocks of %d)", len(b.data), b.offset, e.path, e.size, e.block)
	}
	if f.err != "" {
		return nil
	}
	if blockDigest(b.data) != b.digest {
		r.drop(f, fmt.Sprintf("%s: the block at offset %d arrived corrupt (checksum mismatch)", e.path, b.offset))
		return nil
	}
	if err := r.open(f); err != nil {
		r.drop(f, pathErr(f.t, f.part, err))
		return r.full(f, err)
	}
	if _, err := f.out.WriteAt(b.data, int64(b.offset)); err != nil {
		r.drop(f, pathErr(f.t, f.target, err))
		return r.full(f, err)
	}
	i := b.offset / uint64(e.block)
	f.got[i], f.gotSet[i] = b.digest, true
	f.recvd += uint64(len(b.data))
	r.obs.event(Event{Kind: EventBytes, ID: e.id, Path: e.path, Size: int64(e.size), N: int64(b.offset) + int64(len(b.data))})
	return nil
}

// full ends the session with a SpaceError if err says f's file system is
// full: the next files would not fit either.
func (r *receiver) full(f *rfile, err error) error {
	if !isFull(err) {
		return nil
	}
	return full(f.t, path.Dir(f.target), f.e.path)
}

// open opens f's partial file for writing: the one there when resuming
// from it, a copy of the target when resuming from that, else a new one.
func (r *receiver) open(f *rfile) error {
	if f.out != nil {
		return nil
	}
	flags := os.O_WRONLY | os.O_CREATE
	if len(f.have) == 0 || f.fromTarget {
		flags |= os.O_TRUNC
	}
	out, err := f.t.OpenFile(f.part, flags, 0o600)
	if err != nil {
		return err
	}
	f.out = out
	if f.fromTarget {
		in, err := f.t.Open(f.target)
		if err != nil {
			return err
		}
		defer in.Close()
		if _, err := io.Copy(out, in); err != nil {
			return err
		}
	}
	return nil
}

// drop fails f: it closes and removes the partial file (a file whose data
// cannot be stored or trusted is not kept for a resume).
func (r *receiver) drop(f *rfile, why string) {
	if f.out != nil {
		f.out.Close()
		f.out = nil
	}
	_ = f.t.Remove(f.part)
	r.refund(f)
	if f.err == "" {
		f.err = why
	}
}

// stop ends the session: a resumed copy takes its files over (busySet).
// Its reads and writes fail at once.
func (r *receiver) stop() { _ = r.ep.c.SetDeadline(time.Now()) }
