package xfer

import (
	"bufio"
	"bytes"
	"errors"
	"testing"
)

// seeds are valid messages of every type.
func seeds() map[byte][][]byte {
	return map[byte][][]byte{
		mRequest: {
			request{op: opGet, dest: "x", paths: []string{"a", "b/c"}, recursive: true}.encode(),
			request{op: opPut, dest: "d", paths: []string{"a", "b"}, resume: true, flags: flagInto}.encode(),
			request{op: opPush, dest: "d", paths: []string{"."}, target: "b:2811@hub", streams: 8, compress: "auto"}.encode(),
			request{op: opGet, dest: "x", paths: []string{"a"}, limit: 20 << 20}.encode(),
		},
		mAbort:    {enc(nil).str("xfer: quota: refused")},
		mAccept:   {{0}, {placeInto}, {placeAs}},
		mRefuse:   {enc(nil).str("no")},
		mDelegate: {enc(nil).bytes(nil), enc(nil).bytes([]byte("csr"))},
		mPlan:     {enc(nil).u64(3).u64(1 << 40)},
		mFile: {
			entry{id: 1, kind: kindFile, path: "a/b", size: 5 << 20, mode: 0o644, mtime: 1e18, block: DefaultBlock}.encode(),
			entry{id: 2, kind: kindDir, path: "a", mode: 0o755}.encode(),
		},
		mData: {append(block{id: 1, offset: DefaultBlock, digest: 7}.header(), 1, 2, 3)},
		mEnd:  {enc(nil).u32(1).u64(99)},
		mFail: {fail{id: 0, path: "x", text: "x: no such file"}.encode(), fail{id: 3, path: "y", text: "y: changed", changed: true}.encode()},
		mWant: {
			want{id: 1, have: []uint64{1, 2}}.encode(),
			want{id: 2, status: wantSkip}.encode(),
			want{id: 3, status: wantError, text: "full"}.encode(),
		},
		mAck:    {ack{id: 1, ok: true, kept: 1, got: 2}.encode(), ack{id: 1, text: "bad"}.encode()},
		mEvent:  {Event{Kind: EventBytes, ID: 1, Path: "p", Size: 10, N: 5}.encode()},
		mResult: {[]byte(`{"files":1,"bytes":10}`)},
	}
}

// decode runs the decoder of typ and, for a valid message, returns its
// encoding again (nil when the type has no encoder).
func decode(typ byte, p []byte) ([]byte, error) {
	switch typ {
	case mRequest:
		r, err := decodeRequest(p)
		return r.encode(), err
	case mAccept:
		_, err := decodeAccept(p)
		return p, err
	case mRefuse, mAbort:
		s, err := decodeText(p)
		return enc(nil).str(s), err
	case mDelegate:
		b, err := decodeBlob(p)
		return enc(nil).bytes(b), err
	case mPlan:
		a, b, err := decodePlan(p)
		return enc(nil).u64(a).u64(b), err
	case mFile:
		e, err := decodeEntry(p)
		return e.encode(), err
	case mData:
		b, err := decodeBlock(p)
		return append(b.header(), b.data...), err
	case mEnd:
		e, err := decodeEnd(p)
		return enc(nil).u32(e.id).u64(e.digest), err
	case mFail:
		f, err := decodeFail(p)
		return f.encode(), err
	case mWant:
		w, err := decodeWant(p)
		return w.encode(), err
	case mAck:
		a, err := decodeAck(p)
		return a.encode(), err
	case mEvent:
		e, err := decodeEvent(p)
		return e.encode(), err
	case mResult:
		_, err := decodeSummary(p)
		return nil, err
	}
	return nil, errFrame
}

func TestSeedsDecode(t *testing.T) {
	for typ, ps := range seeds() {
		for _, p := range ps {
			if again, err := decode(typ, p); err != nil || (again != nil && !bytes.Equal(again, p)) {
				t.Errorf("message %d %x: %v, encoded again %x", typ, p, err, again)
			}
			// every strict prefix and every extension is refused
			for i := range p {
				if _, err := decode(typ, p[:i]); err == nil && typ != mData && typ != mResult {
					t.Errorf("message %d cut to %d bytes decoded", typ, i)
				}
			}
			if _, err := decode(typ, append(append([]byte(nil), p...), 0)); err == nil && typ != mData {
				t.Errorf("message %d with a byte more decoded", typ)
			}
		}
	}
}

func TestBadMessages(t *testing.T) {
	for _, c := range []struct {
		typ byte
		p   []byte
	}{
		{mRequest, request{op: 9, dest: "x", paths: []string{"a"}}.encode()},
		{mRequest, request{op: opGet, dest: "x"}.encode()},                                    // no paths
		{mRequest, request{op: opPut, dest: "x"}.encode()},                                    // a put names its sources
		{mRequest, request{op: opGet, dest: "x", paths: []string{"a"}, target: "b"}.encode()}, // only a push has a target
		{mRequest, request{op: opPut, dest: "x", paths: []string{"a"}, flags: flagInto | flagAs}.encode()},
		{mFile, entry{id: 1, path: "../x", block: 1}.encode()},
		{mFile, entry{id: 1, path: "/x", block: 1}.encode()},
		{mFile, entry{id: 1, path: ".", kind: kindDir}.encode()},
		{mFile, entry{id: 1, path: "a/..", kind: kindDir}.encode()},
		{mFile, entry{id: 1, path: "a/../b", block: 1}.encode()},
		{mFile, entry{id: 1, path: "a/./b", block: 1}.encode()},
		{mFile, entry{id: 1, path: "a//b", block: 1}.encode()},
		{mFile, entry{id: 1, path: "a/", kind: kindDir}.encode()},
		{mFile, entry{id: 1, path: "", block: 1}.encode()},
		{mFile, entry{id: 1, path: "x", block: 0}.encode()},
		{mFile, entry{id: 1, path: "x", block: 1, size: maxBlocks + 1}.encode()},
		{mFile, entry{id: 0, path: "x", block: 1}.encode()},
		{mFile, entry{id: 1, path: "x", kind: kindDir, size: 1}.encode()},
		{mFile, entry{id: 1, path: "x", block: 1, mode: 0o170000}.encode()},
		{mFile, entry{id: 1, path: "a\x00b", block: 1}.encode()},
		{mFile, entry{id: 1, path: "a\nb", block: 1}.encode()},
		{mFile, entry{id: 1, path: "a/b\x7f", block: 1}.encode()},
		{mFile, entry{id: 1, path: "a\xffb", block: 1}.encode()},
		{mData, block{id: 1}.header()},
		{mWant, want{id: 1, status: wantSkip, have: []uint64{1}}.encode()},
		{mWant, want{id: 1, status: 7}.encode()},
		{mAck, ack{id: 1, ok: true, text: "x"}.encode()},
		{mAck, ack{id: 1}.encode()},
		{mFail, fail{id: 1, path: "x"}.encode()},
		{mFail, fail{id: 0, path: "x", text: "x", changed: true}.encode()},
		{mFail, append(enc(nil).u32(1).str("x").str("x"), 2)},
		{mEvent, Event{Kind: 9}.encode()},
		{mResult, []byte(`{"files":1,"bogus":2}`)},
		{mResult, []byte(`{"files":1}{}`)},
	} {
		if _, err := decode(c.typ, c.p); !errors.Is(err, errFrame) {
			t.Errorf("message %d %x: %v, want a malformed-message error", c.typ, c.p, err)
		}
	}
	var buf []byte
	big := enc(nil).u8(mData).u32(maxFrame + 1)
	if _, _, err := readFrame(bufio.NewReader(bytes.NewReader(big)), &buf); !errors.Is(err, errFrame) {
		t.Errorf("an oversized frame: %v", err)
	}
}

func FuzzMessage(f *testing.F) {
	for typ, ps := range seeds() {
		for _, p := range ps {
			f.Add(typ, p)
		}
	}
	f.Fuzz(func(t *testing.T, typ byte, p []byte) {
		again, err := decode(typ, p)
		if err == nil && again != nil && !bytes.Equal(again, p) {
			t.Errorf("message %d %x decoded, and encodes as %x", typ, p, again)
		}
	})
}
