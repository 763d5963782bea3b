package xfer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/chain"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
)

var ctx = context.Background()

func TestPutGetTree(t *testing.T) {
	src, root, back := t.TempDir(), t.TempDir(), t.TempDir()
	sizes := map[string]int{"d/empty": 0, "d/small": 1, "d/odd": DefaultBlock + 7, "d/sub/three": 3 * DefaultBlock, "d/sub/deeper/x": 4096}
	for name, size := range sizes {
		randomFile(t, filepath.Join(src, name), size, 0o640)
	}
	if err := os.MkdirAll(filepath.Join(src, "d/emptydir"), 0o750); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(src, "d/sub"), 0o711)
	dial, _ := service(t, Config{Root: root})
	var events int
	sum, err := Put(ctx, dial, []string{filepath.Join(src, "d")}, ".", Options{Recursive: true, Progress: func(Event) { events++ }})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for name, size := range sizes {
		sameFile(t, filepath.Join(src, name), filepath.Join(root, name))
		total += size
	}
	if sum.Files != len(sizes) || sum.Dirs != 4 || sum.Failed != 0 || sum.Bytes != int64(total) || sum.Sent != int64(total) || events == 0 {
		t.Errorf("put summary %+v (%d events), want %d files, 4 dirs, %d bytes sent", sum, events, len(sizes), total)
	}
	if fi, err := os.Stat(filepath.Join(root, "d/sub")); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("d/sub: %v %v, want mode 0711", fi, err)
	}
	// back, as another name (placement "as": the destination does not exist)
	sum, err = Get(ctx, dial, []string{"d"}, filepath.Join(back, "copy"), Options{Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	for name := range sizes {
		sameFile(t, filepath.Join(src, name), filepath.Join(back, "copy", strings.TrimPrefix(name, "d/")))
	}
	if sum.Files != len(sizes) || sum.Failed != 0 || sum.Sent != int64(total) {
		t.Errorf("get summary %+v", sum)
	}
	// a file into an existing directory, and without -r a directory fails alone
	sum, err = Get(ctx, dial, []string{"d/odd", "d/sub"}, back, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sameFile(t, filepath.Join(src, "d/odd"), filepath.Join(back, "odd"))
	if sum.Files != 1 || sum.Failed != 1 || !strings.Contains(sum.Errors[0].Error, "copy it with -r") {
		t.Errorf("get of a file and a directory without -r: %+v", sum)
	}
}

// A partial file from an interrupted transfer is resumed: only the blocks
// it lacks are sent, and one whose byte was flipped is sent again.
func TestResumeAndFlippedByte(t *testing.T) {
	src, root := t.TempDir(), t.TempDir()
	data := randomFile(t, filepath.Join(src, "f"), 5*DefaultBlock+100, 0o600)
	dial, _ := service(t, Config{Root: root})
	part := filepath.Join(root, ".f"+partSuffix)
	for _, flip := range []bool{false, true} {
		os.Remove(filepath.Join(root, "f"))
		have := append([]byte(nil), data[:3*DefaultBlock+10]...) // 3 whole blocks and a piece
		if flip {
			have[DefaultBlock+5] ^= 0x40
		}
		if err := os.WriteFile(part, have, 0o600); err != nil {
			t.Fatal(err)
		}
		sum, err := Put(ctx, dial, []string{filepath.Join(src, "f")}, "f", Options{Resume: true})
		if err != nil {
			t.Fatal(err)
		}
		sameFile(t, filepath.Join(src, "f"), filepath.Join(root, "f"))
		wantKept := int64(3 * DefaultBlock)
		if flip {
			wantKept -= DefaultBlock
		}
		if sum.Kept != wantKept || sum.Sent != int64(len(data))-wantKept {
			t.Errorf("flip %v: kept %d sent %d, want kept %d sent %d", flip, sum.Kept, sum.Sent, wantKept, int64(len(data))-wantKept)
		}
		if _, err := os.Stat(part); !os.IsNotExist(err) {
			t.Errorf("the partial file is still there: %v", err)
		}
	}
	// without --resume a partial file is not trusted
	os.WriteFile(part, data[:DefaultBlock], 0o600)
	sum, err := Put(ctx, dial, []string{filepath.Join(src, "f")}, "f", Options{})
	if err != nil || sum.Sent != int64(len(data)) {
		t.Errorf("without resume: %+v %v", sum, err)
	}
	// with --resume, a whole file already there is not sent again
	sum, err = Put(ctx, dial, []string{filepath.Join(src, "f")}, "f", Options{Resume: true})
	if err != nil || sum.Sent != 0 || sum.Kept != int64(len(data)) || sum.Files != 1 {
		t.Errorf("resume of a whole file: %+v %v", sum, err)
	}
}

// A connection dropped half way is resumed at once, sending the rest.
func TestDroppedConnectionResumes(t *testing.T) {
	src, root, back := t.TempDir(), t.TempDir(), t.TempDir()
	size := 8 * DefaultBlock
	randomFile(t, filepath.Join(src, "big"), size, 0o644)
	for i := range 50 {
		randomFile(t, filepath.Join(src, "many", "f"+string(rune('a'+i%26))+strings.Repeat("x", i/26)), 1000+i, 0o644)
	}
	dial, _ := service(t, Config{Root: root})
	var logs []string
	o := Options{Recursive: true, Backoff: 10e6, Logf: func(f string, a ...any) { logs = append(logs, f) }}
	sum, err := Put(ctx, dropAfter(dial, int64(size/2)), []string{filepath.Join(src, "big"), filepath.Join(src, "many")}, ".", o)
	if err != nil {
		t.Fatal(err)
	}
	sameFile(t, filepath.Join(src, "big"), filepath.Join(root, "big"))
	if fi, err := os.Stat(filepath.Join(root, "many")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("a directory made by the dropped attempt: %v %v, want the source's mode 0755", fi, err)
	}
	if sum.Attempts != 2 || sum.Files != 51 || sum.Sent > int64(size)+60000+2*DefaultBlock || len(logs) != 1 {
		t.Errorf("put through a dropped connection: %+v, %d logs", sum, len(logs))
	}
	// and the same the other way
	sum, err = Get(ctx, dropAfter(dial, int64(size/2)), []string{"big"}, back, Options{Backoff: 10e6})
	if err != nil {
		t.Fatal(err)
	}
	sameFile(t, filepath.Join(src, "big"), filepath.Join(back, "big"))
	if sum.Attempts != 2 || sum.Files != 1 {
		t.Errorf("get through a dropped connection: %+v", sum)
	}
}

// Bad input fails with a clear error and leaves the service serving.
func TestBadInput(t *testing.T) {
	src, root, out, outside := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	randomFile(t, filepath.Join(src, "f"), 1000, 0o644)
	randomFile(t, filepath.Join(outside, "secret"), 10, 0o644)
	randomFile(t, filepath.Join(root, "ok"), 10, 0o644)
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "abs")); err != nil {
		t.Fatal(err)
	}
	dial, _ := service(t, Config{Root: root})
	for _, c := range []struct {
		paths []string
		want  string
	}{
		{[]string{"../x"}, "escapes the root"},
		{[]string{"/etc/passwd"}, "absolute path"},
		{[]string{"out/secret"}, "escapes"},
		{[]string{"abs"}, "escapes"},
		{[]string{"missing"}, "no such file"},
	} {
		sum, err := Get(ctx, dial, c.paths, out, Options{})
		msg := ""
		if err != nil {
			msg = err.Error()
		} else if len(sum.Errors) > 0 {
			msg = sum.Errors[0].Error
		}
		if !strings.Contains(msg, c.want) || sum.Files != 0 {
			t.Errorf("get %v: %+v, %v; want an error with %q", c.paths, sum, err, c.want)
		}
	}
	for _, dest := range []string{"../x", "/tmp/x", "out/x", "out"} {
		sum, err := Put(ctx, dial, []string{filepath.Join(src, "f")}, dest, Options{})
		if err == nil && sum.Failed == 0 {
			t.Errorf("put to %s: %+v, want an error", dest, sum)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Errorf("a put wrote outside the root")
	}
	if fs, _ := os.ReadDir(out); len(fs) != 0 {
		t.Errorf("failed gets left %v", fs)
	}
	if _, err := Get(ctx, dial, []string{"ok"}, out, Options{}); err != nil {
		t.Errorf("the service stopped serving: %v", err)
	}
}

// A push sends from one service to another; the caller only watches. In
// a grid with a CA the source dials with a proxy the caller delegated,
// restricted to the target's transfer service.
func TestPush(t *testing.T) {
	rootA, rootB := t.TempDir(), t.TempDir()
	randomFile(t, filepath.Join(rootA, "tree/a"), 2*DefaultBlock+3, 0o644)
	randomFile(t, filepath.Join(rootA, "tree/b/c"), 10, 0o600)
	dialB, _ := service(t, Config{Root: rootB})
	g := pkitest.New(t, "grid")
	alice := g.User(t, "alice", "physics")
	var creds []*chain.Result
	dialA, _ := service(t, Config{Root: rootA, Delegation: ProxyDelegation{Lifetime: time.Hour}, Push: func(ctx context.Context, target string, l Link, cred *proxy.Credential) (net.Conn, error) {
		if target != "b" || l.Streams != 4 {
			return nil, fmt.Errorf("push to %q with %+v", target, l)
		}
		if _, err := pki.FromProxy(cred, g.Trust); err != nil {
			return nil, err
		}
		r, err := g.Trust.VerifyCertificates(cred.Chain)
		if err != nil {
			return nil, err
		}
		creds = append(creds, r)
		return dialB(ctx)
	}})
	var events []Event
	o := Options{Recursive: true, Progress: func(e Event) { events = append(events, e) },
		Delegate: DelegateProxy(alice, []string{"port-2811"}, 0)}
	sum, err := Push(ctx, dialA, []string{"tree"}, "b", "copy", Link{Streams: 4}, o)
	if err != nil {
		t.Fatal(err)
	}
	sameFile(t, filepath.Join(rootA, "tree/a"), filepath.Join(rootB, "copy/a"))
	sameFile(t, filepath.Join(rootA, "tree/b/c"), filepath.Join(rootB, "copy/b/c"))
	if sum.Files != 2 || sum.Sent != 2*DefaultBlock+13 || len(events) < 4 || len(creds) != 1 {
		t.Fatalf("push: %+v, %d events, %d credentials", sum, len(events), len(creds))
	}
	r := creds[0]
	if r.Name != "alice" || r.Proxies != 1 || !slices.Equal(r.Restriction, []string{"port-2811"}) || time.Until(r.NotAfter) > time.Hour {
		t.Errorf("the delegated proxy proves %s through %d proxies, restricted to %v, until %v; want alice's, one proxy, port-2811, within the hour asked",
			r.Subject(), r.Proxies, r.Restriction, r.NotAfter)
	}
	// without the caller's answer the push is refused
	_, err = Push(ctx, dialA, []string{"tree"}, "b", "copy2", Link{Streams: 4}, Options{Recursive: true})
	if err == nil || !strings.Contains(err.Error(), "delegated credential") {
		t.Errorf("push without delegation: %v", err)
	}
	// an answer that is no proxy for the source's key is refused by the source
	o.Delegate = func(ctx context.Context, target string, req []byte) ([]byte, error) { return []byte("GLDA junk"), nil }
	sum, err = Push(ctx, dialA, []string{"tree"}, "b", "copy3", Link{Streams: 4}, o)
	if err == nil || !strings.Contains(err.Error(), "delegation: proxy: malformed delegation answer") {
		t.Errorf("push with a bad answer: %+v %v", sum, err)
	}
	// a service without Push refuses pushes
	_, err = Push(ctx, dialB, []string{"copy"}, "a", "x", Link{}, Options{})
	if err == nil || !strings.Contains(err.Error(), "does not push") {
		t.Errorf("push from a service that does not push: %v", err)
	}
	if len(creds) != 1 {
		t.Errorf("%d pushes dialled, want 1", len(creds))
	}
}

// A source in an open grid asks nothing: the caller's Delegate answers
// nothing and the source dials as itself.
func TestPushOpenGrid(t *testing.T) {
	rootA, rootB := t.TempDir(), t.TempDir()
	randomFile(t, filepath.Join(rootA, "f"), 100, 0o644)
	dialB, _ := service(t, Config{Root: rootB})
	dialA, _ := service(t, Config{Root: rootA, Push: func(ctx context.Context, target string, l Link, cred *proxy.Credential) (net.Conn, error) {
		if cred != nil {
			return nil, errors.New("a credential in an open grid")
		}
		return dialB(ctx)
	}})
	g := pkitest.New(t, "grid")
	o := Options{Delegate: DelegateProxy(g.User(t, "alice"), []string{"port-2811"}, 0)}
	if _, err := Push(ctx, dialA, []string{"f"}, "b", "f", Link{}, o); err != nil {
		t.Fatal(err)
	}
	sameFile(t, filepath.Join(rootA, "f"), filepath.Join(rootB, "f"))
}
