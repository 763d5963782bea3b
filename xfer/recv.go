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

// receiver stores what a sender offers under dest in t.
type receiver struct {
	ep     *endpoint
	t      tree
	dest   string
	place  uint8
	resume bool
	obs    *observer
	tally  *tally

	files map[uint32]*rfile
	busy  *busySet
	top   string // placeAs: the one source's name
	dirs  []dirMeta
}

type dirMeta struct {
	name  string
	mode  os.FileMode
	mtime time.Time
}

// rfile is a file being received.
type rfile struct {
	e          entry
	target     string
	part       string
	have       []uint64 // digests of what the receiver had
	fromTarget bool     // have describes target itself (a whole file already there)
	got        []uint64 // digests of blocks received; 0 with gotSet false: none
	gotSet     []bool
	out        *os.File
	recvd      uint64
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
// service; nil for a session of its own).
func receive(ep *endpoint, t tree, dest string, place uint8, resume bool, busy *busySet, obs *observer, tl *tally) error {
	if busy == nil {
		busy = &busySet{}
	}
	r := &receiver{ep: ep, t: t, dest: dest, place: place, resume: resume, busy: busy, obs: obs, tally: tl, files: map[uint32]*rfile{}}
	defer r.closeAll()
	for {
		typ, p, err := ep.recv()
		if err != nil {
			return err
		}
		switch typ {
		case mPlan:
			files, size, err := decodePlan(p)
			if err != nil {
				return err
			}
			obs.event(Event{Kind: EventPlan, N: int64(files), Size: int64(size)})
		case mFile:
			e, err := decodeEntry(p)
			if err != nil {
				return err
			}
			if r.files[e.id] != nil {
				return fmt.Errorf("xfer: entry %d offered twice", e.id)
			}
			if err := ep.send(mWant, r.offered(e).encode()); err != nil {
				return err
			}
		case mData:
			b, err := decodeBlock(p)
			if err != nil {
				return err
			}
			if err := r.data(b); err != nil {
				return err
			}
		case mEnd:
			e, err := decodeEnd(p)
			if err != nil {
				return err
			}
			f := r.files[e.id]
			if f == nil || f.got == nil {
				return fmt.Errorf("xfer: the end of entry %d, never asked for", e.id)
			}
			a := r.end(f, e.digest)
			r.busy.release(f.part)
			delete(r.files, e.id)
			if err := ep.send(mAck, a.encode()); err != nil {
				return err
			}
		case mFail:
			fl, err := decodeFail(p)
			if err != nil {
				return err
			}
			if f := r.files[fl.id]; fl.id != 0 {
				if f == nil || f.got == nil {
					return fmt.Errorf("xfer: a failure of entry %d, never asked for", fl.id)
				}
				r.drop(f, "")
				r.busy.release(f.part)
				delete(r.files, fl.id)
			}
			r.tally.failed(fl.path, fl.text)
			r.obs.event(Event{Kind: EventDone, ID: fl.id, Path: fl.path, Err: fl.text})
		case mBye:
			r.finishDirs()
			return ep.sendNow(mBye)
		default:
			return fmt.Errorf("%w: message %d from a sender", errFrame, typ)
		}
	}
}

// targetOf maps an entry path to its name in t.
func (r *receiver) targetOf(p string) (string, error) {
	if r.place == placeInto {
		return path.Join(r.dest, p), nil
	}
	top, rest, _ := strings.Cut(p, "/")
	if r.top == "" {
		r.top = top
	}
	if top != r.top {
		return "", fmt.Errorf("%s: not a directory, and there are several sources", r.t.Name(r.dest))
	}
	return path.Join(r.dest, rest), nil
}

// offered answers an entry: makes a directory, or looks at what is there
// of a file.
func (r *receiver) offered(e entry) want {
	w := want{id: e.id}
	refuse := func(why string) want {
		r.tally.failed(e.path, why)
		r.obs.event(Event{Kind: EventDone, ID: e.id, Path: e.path, Size: int64(e.size), Err: why})
		return want{id: e.id, status: wantError, text: why}
	}
	target, err := r.targetOf(e.path)
	if err != nil {
		return refuse(err.Error())
	}
	if e.kind == kindDir {
		if err := r.t.Mkdir(target, 0o700); err != nil {
			if fi, serr := r.t.Stat(target); !errors.Is(err, fs.ErrExist) || serr != nil || !fi.IsDir() {
				return refuse(pathErr(r.t, target, err))
			}
		}
		r.dirs = append(r.dirs, dirMeta{target, os.FileMode(e.mode), time.Unix(0, e.mtime)})
		r.tally.dir()
		r.obs.event(Event{Kind: EventDone, ID: e.id, Path: e.path})
		w.status = wantSkip
		return w
	}
	if fi, err := r.t.Lstat(target); err == nil && fi.IsDir() {
		return refuse(r.t.Name(target) + ": a directory is in the way")
	}
	f := &rfile{e: e, target: target, part: path.Join(path.Dir(target), "."+path.Base(target)+partSuffix)}
	if !r.busy.acquire(f.part) {
		return refuse(r.t.Name(target) + ": another transfer is writing it")
	}
	n := blocks(e.size, e.block)
	if r.resume {
		if have, err := r.digests(f.part, e, n); err == nil {
			f.have = have
		} else if fi, err := r.t.Stat(target); err == nil && fi.Mode().IsRegular() && fi.Size() == int64(e.size) && fi.ModTime().UnixNano() == e.mtime {
			if have, err := r.digests(target, e, n); err == nil {
				f.have, f.fromTarget = have, true
			}
		}
	} else {
		_ = r.t.Remove(f.part)
	}
	f.got, f.gotSet = make([]uint64, n), make([]bool, n)
	r.files[e.id] = f
	r.obs.event(Event{Kind: EventStart, ID: e.id, Path: e.path, Size: int64(e.size)})
	w.have = f.have
	return w
}

// digests reads name block by block (at most n blocks) and returns their
// digests.
func (r *receiver) digests(name string, e entry, n int) ([]uint64, error) {
	in, err := r.t.Open(name)
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
		r.drop(f, pathErr(r.t, f.part, err))
		return nil
	}
	if _, err := f.out.WriteAt(b.data, int64(b.offset)); err != nil {
		r.drop(f, pathErr(r.t, f.target, err))
		return nil
	}
	i := b.offset / uint64(e.block)
	f.got[i], f.gotSet[i] = b.digest, true
	f.recvd += uint64(len(b.data))
	r.obs.event(Event{Kind: EventBytes, ID: e.id, Path: e.path, Size: int64(e.size), N: int64(b.offset) + int64(len(b.data))})
	return nil
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
	out, err := r.t.OpenFile(f.part, flags, 0o600)
	if err != nil {
		return err
	}
	f.out = out
	if f.fromTarget {
		in, err := r.t.Open(f.target)
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
	_ = r.t.Remove(f.part)
	if f.err == "" {
		f.err = why
	}
}
