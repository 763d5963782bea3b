package xfer

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// smallFS mounts a tmpfs of 2 MiB at dir (root only; skipped otherwise),
// unmounted when the test ends.
func smallFS(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "gridlink-test", dir).CombinedOutput(); err != nil {
		t.Skipf("mount a small tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
}

// Whatever the quotas, a put that does not fit on the file system it
// writes to is refused before its data flows, naming the file system, in
// words on both ends; a write that finds the file system full mid-way
// stops the session with the same error (before, each file failed alone
// with the bare "no space left on device", and the session went on).
func TestSpace(t *testing.T) {
	src, root := t.TempDir(), t.TempDir()
	small := filepath.Join(root, "small")
	smallFS(t, small)
	randomFile(t, filepath.Join(src, "three"), 3<<20, 0o644)
	var logs logLines
	dial, _ := service(t, Config{Root: root, Logf: logs.add})

	n := len(logs.all())
	_, err := Put(ctx, dial, []string{filepath.Join(src, "three")}, "small/three", Options{Retries: -1})
	var re *RefusedError
	const want = "xfer: no space: the transfer's 3145728 bytes exceed the"
	const where = "free on the file system of small (2097152 bytes, 20971 kept in reserve): refused"
	if !errors.As(err, &re) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), where) {
		t.Errorf("a put larger than the file system: %v, want a refusal naming it", err)
	}
	logs.wait(t, n, where)
	for _, f := range []string{"three", ".three" + partSuffix} {
		if _, err := os.Stat(filepath.Join(small, f)); err == nil {
			t.Errorf("%s was stored", f)
		}
	}

	// a sender that plans nothing, offers 1 MiB that fits, and then finds
	// the file system full (something else filled it)
	c, err := dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ep := newEndpoint(c)
	ep.sendNow(mRequest, request{op: opPut, dest: "small", paths: []string{"one"}, flags: flagInto}.encode())
	if typ, _, err := ep.recv(); err != nil || typ != mAccept {
		t.Fatalf("put: %d %v", typ, err)
	}
	data := make([]byte, 1<<20)
	e := entry{id: 1, kind: kindFile, path: "one", mode: 0o644, mtime: 1e18, size: 1 << 20, block: DefaultBlock}
	ep.send(mPlan, enc(nil).u64(1).u64(0))
	ep.sendNow(mFile, e.encode())
	if typ, p, err := ep.recv(); err != nil || typ != mWant {
		t.Fatalf("offer: %d %q %v", typ, p, err)
	}
	fill(t, filepath.Join(small, "filler"))
	n = len(logs.all())
	d := blockDigest(data)
	ep.send(mData, block{id: 1, digest: d}.header(), data)
	ep.sendNow(mEnd, enc(nil).u32(1).u64(fileDigest(e.size, []uint64{d})))
	typ, p, err := ep.recv()
	said, _ := decodeText(p)
	c.Close() // the service logs once the sender is gone
	const fullFS = "one: the file system of small (2097152 bytes) is full (no space left on device): stopped"
	if err != nil || typ != mAbort || !strings.Contains(said, fullFS) {
		t.Errorf("a write to a full file system: %d %q %v, want an abort naming it", typ, p, err)
	}
	logs.wait(t, n, fullFS)
	if _, err := os.Stat(filepath.Join(small, ".one"+partSuffix)); err == nil {
		t.Error("the partial file of a file that did not fit was kept")
	}
}

// fill writes name until its file system is full.
func fill(t *testing.T, name string) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 64<<10)
	for {
		if _, err := f.Write(b); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	// and what a smaller write still fits
	for _, err := f.Write(b[:512]); err == nil; _, err = f.Write(b[:512]) {
	}
}
