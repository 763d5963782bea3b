package xfer

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// request is the client's opening message (mRequest).
type request struct {
	op        uint8
	flags     uint8
	dest      string
	paths     []string // get, push: the paths asked for; put: the sources' base names (see asked)
	target    string   // opPush: the destination's server, NODE[:PORT][@HUB]
	streams   uint32   // opPush: the link to target: 0 for auto, else a count
	compress  string   // opPush: the link's compression (link.ParseCompression)
	limit     uint64   // bytes per second of file data the sender may send (get, push: the service), 0 for no bound
	recursive bool     // from flags
	resume    bool     // from flags
}

func (r request) encode() []byte {
	fl := r.flags
	if r.recursive {
		fl |= flagRecursive
	}
	if r.resume {
		fl |= flagResume
	}
	e := enc(nil).u8(r.op).u8(fl).str(r.dest).u16(uint16(len(r.paths)))
	for _, p := range r.paths {
		e = e.str(p)
	}
	return e.str(r.target).u32(r.streams).str(r.compress).u64(r.limit)
}

func decodeRequest(p []byte) (request, error) {
	d := dec{p: p}
	var r request
	r.op, r.flags = d.u8(), d.u8()
	r.dest = d.str()
	n := int(d.u16())
	switch {
	case n == 0 && r.op == opPut:
		d.fail("a put that names none of its sources (a client older than this service? upgrade it)")
	case n > maxPaths || n == 0:
		d.fail("%d paths for operation %d (want 1-%d)", n, r.op, maxPaths)
	}
	for i := 0; i < n && d.err == nil; i++ {
		r.paths = append(r.paths, d.str())
	}
	r.target, r.streams, r.compress, r.limit = d.str(), d.u32(), d.str(), d.u64()
	switch {
	case r.op < opGet || r.op > opPush:
		d.fail("unknown operation %d", r.op)
	case r.flags&^flagsKnown != 0 || r.flags&(flagInto|flagAs) == flagInto|flagAs:
		d.fail("flags %#x", r.flags)
	case (r.op == opPush) != (r.target != ""):
		d.fail("a push names a target, other operations do not")
	case r.dest == "":
		d.fail("no destination path")
	}
	r.recursive, r.resume = r.flags&flagRecursive != 0, r.flags&flagResume != 0
	return r, d.done()
}

// entry is an mFile: one file or directory the sender offers. Its path is
// relative, slash-separated and clean, every element a name (see
// checkEntryPath); its first element is the name of the source it came
// from (see locate in recv.go).
type entry struct {
	id    uint32
	kind  uint8
	path  string
	size  uint64
	mode  uint32 // permission bits
	mtime int64  // Unix ns
	block uint32
}

func (f entry) encode() []byte {
	return enc(nil).u32(f.id).u8(f.kind).str(f.path).u64(f.size).u32(f.mode).i64(f.mtime).u32(f.block)
}

func decodeEntry(p []byte) (entry, error) {
	d := dec{p: p}
	f := entry{id: d.u32(), kind: d.u8(), path: d.str(), size: d.u64(), mode: d.u32(), mtime: d.i64(), block: d.u32()}
	switch {
	case f.id == 0:
		d.fail("entry id 0")
	case f.kind != kindFile && f.kind != kindDir:
		d.fail("entry kind %d", f.kind)
	case f.mode&^0o7777 != 0:
		d.fail("mode %#o", f.mode)
	case f.kind == kindDir && f.size != 0:
		d.fail("a directory of %d bytes", f.size)
	case f.kind == kindFile && (f.block == 0 || f.block > MaxBlock):
		d.fail("block size %d (want 1-%d)", f.block, MaxBlock)
	case f.kind == kindFile && (f.size+uint64(f.block)-1)/uint64(f.block) > maxBlocks:
		d.fail("%d bytes in blocks of %d: more than %d blocks", f.size, f.block, maxBlocks)
	}
	if d.err == nil {
		d.err = checkEntryPath(f.path)
	}
	return f, d.done()
}

// block is an mData header; its bytes follow in the payload.
type block struct {
	id     uint32
	offset uint64
	digest uint64
	data   []byte
}

func (b block) header() []byte { return enc(nil).u32(b.id).u64(b.offset).u64(b.digest) }

func decodeBlock(p []byte) (block, error) {
	d := dec{p: p}
	b := block{id: d.u32(), offset: d.u64(), digest: d.u64()}
	if d.err == nil {
		b.data = d.p
		d.p = nil
		if len(b.data) == 0 {
			d.fail("empty data block")
		}
	}
	return b, d.done()
}

// want is an mWant: the receiver's answer to an entry.
type want struct {
	id     uint32
	status uint8
	text   string
	have   []uint64 // digests of the blocks the receiver holds, from block 0
}

func (w want) encode() []byte {
	e := enc(nil).u32(w.id).u8(w.status).str(w.text).u32(uint32(len(w.have)))
	for _, h := range w.have {
		e = e.u64(h)
	}
	return e
}

func decodeWant(p []byte) (want, error) {
	d := dec{p: p}
	w := want{id: d.u32(), status: d.u8(), text: d.str()}
	n := d.u32()
	switch {
	case n > maxBlocks:
		d.fail("%d digests (at most %d)", n, maxBlocks)
	case int(n)*8 != len(d.p) && d.err == nil:
		d.fail("%d digests in %d bytes", n, len(d.p))
	case w.status > wantError:
		d.fail("want status %d", w.status)
	case w.status != wantSend && n != 0:
		d.fail("digests with status %d", w.status)
	}
	for i := uint32(0); i < n && d.err == nil; i++ {
		w.have = append(w.have, d.u64())
	}
	return w, d.done()
}

// ack is an mAck: a file's final state at the receiver.
type ack struct {
	id   uint32
	ok   bool
	text string
	kept uint64 // bytes kept from what the receiver had
	got  uint64 // data bytes received for it
}

func (a ack) encode() []byte {
	ok := uint8(0)
	if a.ok {
		ok = 1
	}
	return enc(nil).u32(a.id).u8(ok).str(a.text).u64(a.kept).u64(a.got)
}

func decodeAck(p []byte) (ack, error) {
	d := dec{p: p}
	a := ack{id: d.u32()}
	ok := d.u8()
	a.text, a.kept, a.got = d.str(), d.u64(), d.u64()
	if ok > 1 {
		d.fail("ack ok %d", ok)
	}
	a.ok = ok == 1
	if a.ok == (a.text != "") && d.err == nil {
		d.fail("an ack has a text exactly when it is not ok")
	}
	return a, d.done()
}

// fail is an mFail: the sender cannot send an entry.
type fail struct {
	id      uint32
	path    string
	text    string
	changed bool // the file changed while it was sent (failChanged)
}

func (f fail) encode() []byte {
	code := uint8(failOther)
	if f.changed {
		code = failChanged
	}
	return enc(nil).u32(f.id).str(f.path).str(f.text).u8(code)
}

func decodeFail(p []byte) (fail, error) {
	d := dec{p: p}
	f := fail{id: d.u32(), path: d.str(), text: d.str()}
	code := d.u8()
	switch {
	case f.text == "":
		d.fail("a failure without a reason")
	case code > failChanged:
		d.fail("failure code %d", code)
	case code == failChanged && f.id == 0:
		d.fail("a change of a file never offered")
	}
	f.changed = code == failChanged
	return f, d.done()
}

// end is an mEnd.
type end struct {
	id     uint32
	digest uint64
}

func decodeEnd(p []byte) (end, error) {
	d := dec{p: p}
	e := end{id: d.u32(), digest: d.u64()}
	return e, d.done()
}

func decodePlan(p []byte) (files, size uint64, err error) {
	d := dec{p: p}
	files, size = d.u64(), d.u64()
	return files, size, d.done()
}

func decodeText(p []byte) (string, error) {
	d := dec{p: p}
	s := d.str()
	return s, d.done()
}

func decodeBlob(p []byte) ([]byte, error) {
	d := dec{p: p}
	b := d.bytes(maxBlob)
	return b, d.done()
}

func (e Event) encode() []byte {
	return enc(nil).u8(uint8(e.Kind)).u32(e.ID).str(e.Path).u64(uint64(e.Size)).u64(uint64(e.N)).str(e.Err)
}

func decodeEvent(p []byte) (Event, error) {
	d := dec{p: p}
	e := Event{Kind: EventKind(d.u8()), ID: d.u32(), Path: d.str(), Size: int64(d.u64()), N: int64(d.u64()), Err: d.str()}
	if (e.Kind < EventPlan || e.Kind > EventDir) && d.err == nil {
		d.fail("event kind %d", e.Kind)
	}
	if (e.Size < 0 || e.N < 0) && d.err == nil {
		d.fail("negative size")
	}
	return e, d.done()
}

func decodeSummary(p []byte) (Summary, error) {
	var s Summary
	if len(p) > maxBlob {
		return s, fmt.Errorf("%w: summary of %d bytes", errFrame, len(p))
	}
	jd := json.NewDecoder(bytes.NewReader(p))
	jd.DisallowUnknownFields()
	if err := jd.Decode(&s); err != nil {
		return s, fmt.Errorf("%w: summary: %v", errFrame, err)
	}
	if jd.More() {
		return s, fmt.Errorf("%w: summary: data after the object", errFrame)
	}
	return s, nil
}

func decodeAccept(p []byte) (uint8, error) {
	d := dec{p: p}
	pl := d.u8()
	if pl > placeAs {
		d.fail("placement %d", pl)
	}
	return pl, d.done()
}
