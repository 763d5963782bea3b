package xfer

import (
	"context"
	"net"
	"strings"
	"testing"
)

// evilEntry is an entry a malicious sender offers, with its bytes.
type evilEntry struct {
	kind   uint8
	path   string
	mode   uint32
	data   []byte
	before func() // runs before the entry is offered (a symbolic link swapped in)
}

// evilSend plays a sender that speaks the protocol but names whatever it
// likes: it offers entries one at a time, sends the data of those wanted,
// then says bye. It returns what the receiver said in words: refused
// entries, failed acks, and an abort (the session's end).
func evilSend(ep *endpoint, entries []evilEntry) (heard []string) {
	if err := ep.send(mPlan, enc(nil).u64(uint64(len(entries))).u64(0)); err != nil {
		return nil
	}
	for i, ee := range entries {
		if ee.before != nil {
			ee.before()
		}
		e := entry{id: uint32(i + 1), kind: ee.kind, path: ee.path, mode: ee.mode, mtime: 1e18}
		if ee.kind == kindFile {
			e.size, e.block = uint64(len(ee.data)), DefaultBlock
		}
		if err := ep.sendNow(mFile, e.encode()); err != nil {
			return heard
		}
		typ, p, err := ep.recv()
		if err != nil {
			return heard
		}
		if typ == mAbort {
			s, _ := decodeText(p)
			return append(heard, s)
		}
		w, err := decodeWant(p)
		if err != nil || typ != mWant {
			return heard
		}
		if w.status == wantError {
			heard = append(heard, w.text)
		}
		if w.status != wantSend {
			continue
		}
		var ds []uint64
		if len(ee.data) > 0 {
			d := blockDigest(ee.data)
			ds = append(ds, d)
			if err := ep.send(mData, block{id: e.id, digest: d}.header(), ee.data); err != nil {
				return heard
			}
		}
		if err := ep.sendNow(mEnd, enc(nil).u32(e.id).u64(fileDigest(e.size, ds))); err != nil {
			return heard
		}
		typ, p, err = ep.recv()
		if err != nil {
			return heard
		}
		if typ == mAbort {
			s, _ := decodeText(p)
			return append(heard, s)
		}
		if a, err := decodeAck(p); err == nil && !a.ok {
			heard = append(heard, a.text)
		}
	}
	if err := ep.sendNow(mBye); err != nil {
		return heard
	}
	typ, p, err := ep.recv()
	if err == nil && typ == mAbort {
		s, _ := decodeText(p)
		heard = append(heard, s)
	}
	return heard
}

// evilFile and evilDir are entries of a malicious sender: a file of 5
// bytes, a directory, both mode 0777.
func evilFile(p string) evilEntry {
	return evilEntry{kind: kindFile, path: p, mode: 0o777, data: []byte("evil\n")}
}

func evilDir(p string) evilEntry { return evilEntry{kind: kindDir, path: p, mode: 0o777} }

// evilListener runs a malicious service on 127.0.0.1: serve plays each
// connection, one after the other. It returns a dialer for it.
func evilListener(t *testing.T, serve func(*endpoint)) Dialer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			serve(newEndpoint(c))
			c.Close()
		}
	}()
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", l.Addr().String())
	}
}

// evilService is a transfer service that answers every get with entries.
// What the client said back comes on the channel, one slice per session.
func evilService(t *testing.T, entries []evilEntry) (Dialer, <-chan []string) {
	heard := make(chan []string, 16)
	return evilListener(t, func(ep *endpoint) {
		if typ, _, err := ep.recv(); err != nil || typ != mRequest {
			return
		}
		if err := ep.sendNow(mAccept, []byte{0}); err != nil {
			return
		}
		heard <- evilSend(ep, entries)
	}), heard
}

// evilPut plays a client that puts entries to the service dial reaches,
// with the request's placement flags and sources' names as given; it
// returns the refusal or what the service said in words.
func evilPut(t *testing.T, dial Dialer, dest string, flags uint8, names []string, entries []evilEntry) []string {
	t.Helper()
	c, err := dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ep := newEndpoint(c)
	if err := ep.sendNow(mRequest, request{op: opPut, dest: dest, paths: names, flags: flags | flagRecursive}.encode()); err != nil {
		t.Fatal(err)
	}
	typ, p, err := ep.recv()
	if err != nil {
		t.Fatal(err)
	}
	if typ == mRefuse {
		s, _ := decodeText(p)
		return []string{s}
	}
	return evilSend(ep, entries)
}

// firstNames is what a put of entries would announce: their first
// elements that are plain names ("x" if none is).
func firstNames(entries []evilEntry) []string {
	var a asked
	for _, e := range entries {
		if first, _, _ := strings.Cut(e.path, "/"); plainName(first) == "" {
			a.add(first)
		}
	}
	if len(a.list) == 0 {
		return []string{"x"}
	}
	return a.list
}
