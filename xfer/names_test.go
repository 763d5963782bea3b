package xfer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A malicious transfer service names what a get writes (scp's
// CVE-2019-6111): .bashrc for hello.txt, .ssh for d, a name no source
// has, a second top directory for the served root, a control character.
// The client refuses the entry, its error names the entry and the names
// it asked for, the service hears the same, and nothing of it is written.
func TestEvilServiceNamesWhatItLikes(t *testing.T) {
	file, dir := evilFile, evilDir
	for _, c := range []struct {
		name      string
		paths     []string               // what the caller asks for
		dest      func(v *victim) string // its destination
		recursive bool
		entries   []evilEntry
		kept      string   // a name the caller asked for, which is stored ("": none)
		bad       string   // the entry refused
		words     []string // what the refusal says besides bad, on both ends
		unsafe    bool     // refused for its form (UnsafePathError), else as not asked for (UnaskedError)
		frame     bool     // refused as a malformed message (not UTF-8)
	}{
		{name: "a file renamed .bashrc", paths: []string{"hello.txt"}, dest: func(v *victim) string { return v.home },
			entries: []evilEntry{file(".bashrc")}, bad: ".bashrc", words: []string{`"hello.txt"`}},
		{name: "a file renamed .bashrc into a new name", paths: []string{"hello.txt"}, dest: func(v *victim) string { return filepath.Join(v.home, "new.txt") },
			entries: []evilEntry{file(".bashrc")}, bad: ".bashrc", words: []string{`"hello.txt"`}},
		{name: "-r .ssh for d", paths: []string{"d"}, recursive: true, dest: func(v *victim) string { return v.home },
			entries: []evilEntry{dir(".ssh"), file(".ssh/authorized_keys")}, bad: ".ssh", words: []string{`"d"`}},
		{name: "-r .ssh for d into a new name", paths: []string{"d"}, recursive: true, dest: func(v *victim) string { return filepath.Join(v.home, "new") },
			entries: []evilEntry{dir(".ssh"), file(".ssh/authorized_keys")}, bad: ".ssh", words: []string{`"d"`}},
		{name: "-r a file below .ssh for d", paths: []string{"d"}, recursive: true, dest: func(v *victim) string { return v.home },
			entries: []evilEntry{dir("d"), file(".ssh/authorized_keys")}, kept: "d", bad: ".ssh/authorized_keys", words: []string{`"d"`}},
		{name: "several sources and a name not among them", paths: []string{"a", "sub/b"}, dest: func(v *victim) string { return v.home },
			entries: []evilEntry{file("a"), file("c")}, kept: "a", bad: "c", words: []string{`"a", "b"`}},
		{name: "the served root and a second top directory", paths: []string{"."}, recursive: true, dest: func(v *victim) string { return v.home },
			entries: []evilEntry{dir("srv"), file("srv/f"), dir(".ssh")}, kept: "srv", bad: ".ssh", words: []string{"the served root"}},
		{name: "the served root named by a file", paths: []string{"."}, recursive: true, dest: func(v *victim) string { return v.home },
			entries: []evilEntry{file(".bashrc")}, bad: ".bashrc", words: []string{"the served root"}},
		{name: "a newline in a name", paths: []string{"d"}, recursive: true, dest: func(v *victim) string { return v.home },
			entries: []evilEntry{dir("d"), file("d/a\nb")}, kept: "d", bad: "d/a\nb", words: []string{"control character 0x0a"}, unsafe: true},
		{name: "an escape in a name", paths: []string{"d"}, recursive: true, dest: func(v *victim) string { return v.home },
			entries: []evilEntry{dir("d"), file("d/\x1b]0;x\x07")}, kept: "d", bad: "d/\x1b]0;x\x07", words: []string{"control character 0x1b"}, unsafe: true},
		{name: "bytes that are not UTF-8 in a name", paths: []string{"d"}, recursive: true, dest: func(v *victim) string { return v.home },
			entries: []evilEntry{dir("d"), file("d/a\xffb")}, kept: "d", bad: "d/a\xffb", words: []string{"not UTF-8"}, frame: true},
		{name: "a DEL in a top name", paths: []string{"d\x7f"}, dest: func(v *victim) string { return v.home },
			entries: []evilEntry{file("d\x7f")}, bad: "d\x7f", words: []string{"control character 0x7f"}, unsafe: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newVictim(t)
			dest := c.dest(v)
			kept := filepath.Join(v.home, c.kept) // what may appear: the name asked for
			if c.kept == "" {
				kept = dest
			}
			before := v.modes(kept)
			dial, heard := evilService(t, c.entries)
			sum, err := Get(ctx, dial, c.paths, dest, Options{Recursive: c.recursive, Retries: -1})
			v.unharmed(c.name, kept, before)
			for _, p := range []string{".ssh", "c", ".bashrc" + partSuffix, "d/a\nb", "d/a\xffb", "new", "new.txt"} {
				if _, err := os.Lstat(filepath.Join(v.home, p)); err == nil {
					t.Errorf("%q was written", p)
				}
			}
			said := <-heard
			var ue *UnsafePathError
			var ne *UnaskedError
			switch {
			case c.frame && !errors.Is(err, errFrame):
				t.Errorf("get: %v (%+v), want a malformed message", err, sum)
			case c.frame:
			case c.unsafe && (!errors.As(err, &ue) || ue.Path != c.bad):
				t.Errorf("get: %v (%+v), want an unsafe-path error naming %q", err, sum, c.bad)
			case !c.unsafe && (!errors.As(err, &ne) || ne.Path != c.bad):
				t.Errorf("get: %v (%+v), want a refusal of %q as not asked for", err, sum, c.bad)
			}
			words := c.words
			if !c.frame { // its text does not name the entry: a message is refused before it is read as one
				words = append([]string{fmt.Sprintf("%q", c.bad)}, c.words...)
			}
			for _, w := range words {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("get: %v, want it to say %s", err, w)
				}
				if len(said) == 0 || !strings.Contains(said[len(said)-1], w) {
					t.Errorf("the service heard %q, want the reason, saying %s", said, w)
				}
			}
		})
	}
}

// A get of the served root takes the name the service gives it, once:
// an honest service's root arrives whole.
func TestGetServedRootInto(t *testing.T) {
	top := t.TempDir()
	root := filepath.Join(top, "data")
	randomFile(t, filepath.Join(root, "d/f"), 10, 0o644)
	randomFile(t, filepath.Join(root, "g"), 10, 0o644)
	out := t.TempDir()
	dial, _ := service(t, Config{Root: root})
	if _, err := Get(ctx, dial, []string{".", "d"}, out, Options{Recursive: true, Retries: -1}); err != nil {
		t.Fatal(err)
	}
	sameFile(t, filepath.Join(root, "d/f"), filepath.Join(out, "data/d/f"))
	sameFile(t, filepath.Join(root, "g"), filepath.Join(out, "data/g"))
	sameFile(t, filepath.Join(root, "d/f"), filepath.Join(out, "d/f"))
}

// A malicious client puts entries its request did not announce (.bashrc
// for hello.txt, .ssh for d, a name among none of its sources), names
// its sources by what is no name, or puts names with control characters:
// the service refuses, says why in words to the client and in its log
// (both naming the entry and the names announced), and stores nothing
// of it.
func TestEvilClientNamesWhatItLikes(t *testing.T) {
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, "sub"), 0o755)
	var logs logLines
	dial, _ := service(t, Config{Root: root, Logf: logs.add})
	file, dir := evilFile, evilDir
	for _, c := range []struct {
		name    string
		dest    string
		flags   uint8
		names   []string // what the put announces
		entries []evilEntry
		words   []string // what the refusal says, on both ends
		kept    string   // an entry it announced, which is stored (in the root)
	}{
		{"a file renamed .bashrc", ".", flagInto, []string{"hello.txt"}, []evilEntry{file(".bashrc")}, []string{`".bashrc"`, `"hello.txt"`}, ""},
		{"a file renamed as a new name", "new.txt", flagAs, []string{"hello.txt"}, []evilEntry{file(".bashrc")}, []string{`".bashrc"`, `"hello.txt"`}, ""},
		{".ssh for d", "sub", flagInto, []string{"d"}, []evilEntry{dir(".ssh"), file(".ssh/authorized_keys")}, []string{`".ssh"`, `"d"`}, ""},
		{"a name among none", ".", flagInto, []string{"a", "b"}, []evilEntry{file("a"), file("c")}, []string{`"c"`, `"a", "b"`}, "a"},
		{"no names (an old client)", ".", flagInto, nil, []evilEntry{file("c")}, []string{"a put that names none of its sources (a client older than this service? upgrade it)"}, ""},
		{"a name with a slash", ".", flagInto, []string{"sub/c"}, []evilEntry{file("sub/c")}, []string{`"sub/c"`, "a name with a slash"}, ""},
		{"a name that is ..", "sub", flagInto, []string{".."}, []evilEntry{file("../c")}, []string{`".."`, `".." element`}, ""},
		{"a newline in a name", "sub", flagInto, []string{"d"}, []evilEntry{dir("d"), file("d/a\nb")}, []string{`"d/a\nb"`, "control character 0x0a"}, "sub/d"},
		{"bytes that are not UTF-8 in a name", "sub", flagInto, []string{"d"}, []evilEntry{dir("d"), file("d/a\xffb")}, []string{"not UTF-8"}, "sub/d"},
		{"a newline in an announced name", ".", flagInto, []string{"a\nb"}, []evilEntry{file("a\nb")}, []string{`"a\nb"`, "control character 0x0a"}, ""},
		{"a newline in the destination", "c\nd", flagAs, []string{"c"}, []evilEntry{file("c")}, []string{`"c\nd"`, "control character 0x0a"}, ""},
	} {
		n := len(logs.all())
		said := evilPut(t, dial, c.dest, c.flags, c.names, c.entries)
		for _, w := range c.words {
			if len(said) == 0 || !strings.Contains(said[len(said)-1], w) {
				t.Errorf("%s: the client heard %q, want the reason, saying %s", c.name, said, w)
			}
			logs.wait(t, n, w)
		}
		if c.kept != "" {
			os.RemoveAll(filepath.Join(root, c.kept))
		}
		des, _ := os.ReadDir(root)
		subs, _ := os.ReadDir(filepath.Join(root, "sub"))
		if len(des) != 1 || len(subs) != 0 {
			t.Errorf("%s: the root holds %v, sub %v; want sub alone", c.name, des, subs)
			for _, d := range []string{root, filepath.Join(root, "sub")} {
				des, _ := os.ReadDir(d)
				for _, de := range des {
					if de.Name() != "sub" {
						os.RemoveAll(filepath.Join(d, de.Name()))
					}
				}
			}
		}
	}
}

// A malicious push source (A) announces the name the caller asked for to
// the target (B) and offers another: B refuses it, naming both in its log
// and in what A hears (which A passes on to the caller here), and stores
// nothing of it.
func TestEvilPushSourceNamesWhatItLikes(t *testing.T) {
	rootB := t.TempDir()
	var logs logLines
	dialB, _ := service(t, Config{Root: rootB, Logf: logs.add})
	dialA := evilPushSource(t, dialB, []evilEntry{evilDir(".ssh"), evilFile(".ssh/authorized_keys")})
	_, err := Push(ctx, dialA, []string{"d"}, "b", ".", Link{}, Options{Recursive: true, Retries: -1})
	for _, w := range []string{`".ssh"`, `asked for "d"`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("push: %v, want the target's refusal, saying %s", err, w)
		}
		logs.wait(t, 0, w)
	}
	if des, _ := os.ReadDir(rootB); len(des) != 0 {
		t.Errorf("the target holds %v", des)
	}
}

// evilPushSource is a push source that answers a push by putting entries
// to the service dialB reaches under the names the caller asked for
// (their base names), and tells the caller what that service said.
func evilPushSource(t *testing.T, dialB Dialer, entries []evilEntry) Dialer {
	return evilListener(t, func(ep *endpoint) { evilPush(ep, dialB, entries) })
}

func evilPush(ep *endpoint, dialB Dialer, entries []evilEntry) {
	typ, p, err := ep.recv()
	if err != nil || typ != mRequest {
		return
	}
	req, err := decodeRequest(p)
	if err != nil || ep.sendNow(mAccept, []byte{0}) != nil || ep.sendNow(mDelegate, enc(nil).bytes(nil)) != nil {
		return
	}
	if typ, _, err := ep.recv(); err != nil || typ != mDelegate {
		return
	}
	cb, err := dialB(ctx)
	if err != nil {
		return
	}
	defer cb.Close()
	names := askedOf(req.paths).list
	epB := newEndpoint(cb)
	put := request{op: opPut, dest: req.dest, paths: names, recursive: req.recursive}
	if epB.sendNow(mRequest, put.encode()) != nil {
		return
	}
	if typ, _, err := epB.recv(); err != nil || typ != mAccept {
		return
	}
	heard := evilSend(epB, entries)
	b, _ := json.Marshal(Summary{Error: strings.Join(heard, "; ")})
	_ = ep.sendNow(mResult, b)
}

// An honest sender does not offer a name with a control character, which
// every receiver refuses: that entry fails alone, named, and the rest of
// the copy goes on, both ways.
func TestControlNamesNotSent(t *testing.T) {
	root, local, out := t.TempDir(), t.TempDir(), t.TempDir()
	for _, d := range []string{filepath.Join(root, "d"), filepath.Join(local, "d")} {
		randomFile(t, filepath.Join(d, "ok"), 10, 0o644)
		randomFile(t, filepath.Join(d, "a\nb"), 10, 0o644)
	}
	dial, _ := service(t, Config{Root: root})
	for _, c := range []struct {
		name string
		copy func() (Summary, error)
		ok   string
	}{
		{"get", func() (Summary, error) {
			return Get(ctx, dial, []string{"d"}, out, Options{Recursive: true, Retries: -1})
		}, filepath.Join(out, "d/ok")},
		{"put", func() (Summary, error) {
			return Put(ctx, dial, []string{filepath.Join(local, "d")}, "in", Options{Recursive: true, Retries: -1})
		}, filepath.Join(root, "in/ok")},
	} {
		sum, err := c.copy()
		if err != nil || sum.Files != 1 || sum.Failed != 1 || !strings.Contains(sum.Errors[0].Error, `a\nb": a name with the control character 0x0a: not sent`) {
			t.Errorf("%s: %v, %+v; want d/ok copied and d/a\\nb failed, naming why", c.name, err, sum)
		}
		if _, err := os.Stat(c.ok); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	for _, p := range []string{filepath.Join(out, "d/a\nb"), filepath.Join(root, "in/a\nb")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%q was written", p)
		}
	}
}
