package lab_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/status"
)

type xferLab struct {
	t    *testing.T
	topo *topology.Topology
	bin  string
	o    *matrix.Overlay
}

// issue gives a gridlink command that runs its own node a certificate of
// the overlay's CA; with asNobody its key file is made nobody's.
func (x *xferLab) issue(name string, asNobody bool) []string {
	i, err := x.o.Issue(name)
	if err != nil {
		x.t.Fatal(err)
	}
	if asNobody {
		if err := os.Chown(i.Key, 65534, 65534); err != nil {
			x.t.Fatal(err)
		}
	}
	return i.Args()
}

func (x *xferLab) host(name string) *topology.Host { return labtest.Host(x.t, x.topo, name) }

// serve starts gridlink serve on host as xfer-HOST, serving root (as
// user nobody with asNobody), and waits until it listens.
func (x *xferLab) serve(host, root string, asNobody bool, extra ...string) *exec.Cmd {
	t := x.t
	h := x.host(host)
	args := []string{"netns", "exec", lab.HostNS(h)}
	if asNobody {
		args = append(args, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
	}
	args = append(args, x.bin, "serve", "--name", "xfer-"+host, "--hub", matrix.HubAddr(h), "--root", root)
	args = append(args, x.issue("xfer-"+host, asNobody)...)
	args = append(args, extra...)
	cmd := exec.Command("ip", args...)
	logPath := filepath.Join(t.TempDir(), "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("serve on %s:\n%s", host, b)
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if b, _ := os.ReadFile(logPath); bytes.Contains(b, []byte("serving")) {
			return cmd
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("gridlink serve on %s did not start:\n%s", host, b)
		}
	}
}

// cpCmd is gridlink cp run on host with args, a JSON summary and no
// progress display.
func (x *xferLab) cpCmd(ctx context.Context, host string, args ...string) *exec.Cmd {
	return x.cpCmdAs(ctx, "alice", host, args...)
}

// cpCmdAs is cpCmd run as user (a proxy of the lab CA): the user whose
// proxy the source of a third-party transfer acts with.
func (x *xferLab) cpCmdAs(ctx context.Context, user, host string, args ...string) *exec.Cmd {
	h := x.host(host)
	cred, err := x.o.IssueUser(user)
	if err != nil {
		x.t.Fatal(err)
	}
	full := append([]string{"netns", "exec", lab.HostNS(h), x.bin, "cp", "--json", "--quiet", "--hub", matrix.HubAddr(h)}, cred.Args()...)
	full = append(full, args...)
	return exec.CommandContext(ctx, "ip", full...)
}

// cp runs gridlink cp on host as alice and returns its summary.
func (x *xferLab) cp(host string, args ...string) (status.Copy, error) {
	return x.cpAs("alice", host, args...)
}

// cpAs runs gridlink cp on host as user and returns its summary.
func (x *xferLab) cpAs(user, host string, args ...string) (status.Copy, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := x.cpCmdAs(ctx, user, host, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var r status.Copy
	if jerr := json.Unmarshal(out.Bytes(), &r); jerr != nil {
		x.t.Fatalf("cp %v on %s: %v, no JSON (%v): %s %s", args, host, err, jerr, out.Bytes(), errb.Bytes())
	}
	return r, err
}

func writeRandom(t *testing.T, name string, size int) {
	t.Helper()
	b := make([]byte, size)
	_, _ = rand.Read(b)
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func sameBytes(t *testing.T, a, b string) {
	t.Helper()
	x, err1 := os.ReadFile(a)
	y, err2 := os.ReadFile(b)
	if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
		t.Errorf("%s and %s differ (%v, %v; %d and %d bytes)", a, b, err1, err2, len(x), len(y))
	}
}

// openDir makes a directory every user may enter (test temp dirs are 0700).
func openDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for p := d; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		_ = os.Chmod(p, 0o755)
	}
	return d
}

// Issue 8 in grid6: resume after a kill, a flipped byte, a routed-only
// pair, a third-party transfer, and bad input (TestGrid6Overlay).
func (g *grid6Overlay) xfer(t *testing.T) {
	topo, bin, o := g.topo, g.bin, g.o
	x := &xferLab{t: t, topo: topo, bin: bin, o: o}
	src := t.TempDir()
	rootD, rootR, rootH := openDir(t), openDir(t), openDir(t)
	// das3d-n1 admits alice only: a third-party transfer to it from
	// rockstar-n1's service works only as alice, by her delegated proxy
	x.serve("das3d-n1", rootD, false, "--allow", "alice")
	x.serve("rockstar-n1", rootR, false)
	x.serve("hiroshi-n1", rootH, false)

	t.Run("KillAndResume", func(t *testing.T) { xferResume(t, x, src, rootD) })
	t.Run("KillAndResumeNewDir", func(t *testing.T) { xferResumeNewDir(t, x, src, rootD) })
	t.Run("Routed", func(t *testing.T) {
		// g5k's nodes have no route out, hiroshi's only ssh: routed only
		writeRandom(t, filepath.Join(src, "routed"), 3<<20+5)
		r, err := x.cp("g5k-n1", filepath.Join(src, "routed"), "xfer-hiroshi-n1:")
		if err != nil || r.Files != 1 || r.Method != "routed" {
			t.Errorf("g5k-n1 -> hiroshi-n1: %+v %v", r, err)
		}
		sameBytes(t, filepath.Join(src, "routed"), filepath.Join(rootH, "routed"))
	})
	t.Run("ThirdParty", func(t *testing.T) {
		// das3v-n1 has rockstar-n1 send a tree to das3d-n1
		for i, size := range []int{0, 1000, 2<<20 + 1, 70000} {
			writeRandom(t, filepath.Join(rootR, "tree", "sub"+string(rune('a'+i%2)), "f"+string(rune('0'+i))), size)
		}
		r, err := x.cp("das3v-n1", "-r", "xfer-rockstar-n1:tree", "xfer-das3d-n1:copy")
		if err != nil || r.Files != 4 || r.Dirs != 3 || r.Failed != 0 {
			t.Errorf("third-party transfer: %+v %v", r, err)
		}
		filepath.Walk(filepath.Join(rootR, "tree"), func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				rel, _ := filepath.Rel(filepath.Join(rootR, "tree"), p)
				sameBytes(t, p, filepath.Join(rootD, "copy", rel))
			}
			return nil
		})
		// bob may not write to das3d-n1: rockstar-n1, acting as bob, is
		// refused there, and bob hears why
		r, err = x.cpAs("bob", "das3v-n1", "-r", "xfer-rockstar-n1:tree", "xfer-das3d-n1:bobs")
		if err == nil || !strings.Contains(r.Failure, "refuses bob") {
			t.Errorf("bob's third-party transfer to a service admitting alice only: %+v %v", r, err)
		}
		if _, err := os.Stat(filepath.Join(rootD, "bobs")); err == nil {
			t.Error("bob's third-party transfer stored something")
		}
	})
	t.Run("BadInput", func(t *testing.T) { xferBadInput(t, x, src) })
}

// xferResume kills a copy about half way, flips a byte of the partial
// file's second block, and resumes: exactly the missing and the flipped
// blocks are sent again.
func xferResume(t *testing.T, x *xferLab, src, root string) {
	const size, block = 48 << 20, 1 << 20
	writeRandom(t, filepath.Join(src, "big"), size)
	part := filepath.Join(root, ".big.gridlink-part")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := x.cpCmd(ctx, "das3v-n1", "--limit", "12M", filepath.Join(src, "big"), "xfer-das3d-n1:")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		if fi, err := os.Stat(part); err == nil && fi.Size() >= size/2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the copy never reached half way: %s", errb.Bytes())
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	time.Sleep(500 * time.Millisecond) // the service notices the drop and closes the file
	if _, err := os.Stat(filepath.Join(root, "big")); err == nil {
		t.Fatal("the killed copy's file is there under its own name")
	}
	// flip a byte in block 1, then count the blocks that should be kept
	f, err := os.OpenFile(part, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	f.ReadAt(b, block+123)
	b[0] ^= 0x01
	f.WriteAt(b, block+123)
	f.Close()
	want, _ := os.ReadFile(filepath.Join(src, "big"))
	have, _ := os.ReadFile(part)
	var kept int64
	for off := 0; off+block <= len(have) && off < size; off += block {
		if xxhash.Sum64(have[off:off+block]) == xxhash.Sum64(want[off:off+block]) {
			kept += block
		}
	}
	t.Logf("killed with %d of %d bytes in the partial file; %d bytes in verified blocks", len(have), size, kept)
	r, err := x.cp("das3v-n1", "--resume", filepath.Join(src, "big"), "xfer-das3d-n1:")
	if err != nil || r.Files != 1 {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if r.KeptBytes != kept || r.SentBytes != size-kept || kept < size/3 || kept > int64(len(have))-block {
		t.Errorf("resume sent %d and kept %d bytes; want %d kept (the partial file's good blocks, the flipped one not) and %d sent", r.SentBytes, r.KeptBytes, kept, size-kept)
	}
	sameBytes(t, filepath.Join(src, "big"), filepath.Join(root, "big"))
	if _, err := os.Stat(part); err == nil {
		t.Error("the partial file is still there")
	}
}

// xferBadInput: a missing source, no permission, a full disk and paths
// escaping the root fail clearly, the service (running as nobody) keeps
// serving, and no partial file passes for a whole one.
func xferBadInput(t *testing.T, x *xferLab, src string) {
	root := openDir(t)
	small := filepath.Join(root, "small")
	os.Mkdir(small, 0o755)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m,mode=0777", "gridlink-test", small).CombinedOutput(); err != nil {
		t.Fatalf("mount a small tmpfs: %v %s", err, out)
	}
	defer exec.Command("umount", small).Run()
	writeRandom(t, filepath.Join(root, "secret"), 100)
	os.Chmod(filepath.Join(root, "secret"), 0)
	os.Mkdir(filepath.Join(root, "ro"), 0o755)
	os.Mkdir(filepath.Join(root, "rw"), 0o777)
	os.Chmod(filepath.Join(root, "rw"), 0o777)
	writeRandom(t, filepath.Join(root, "ok"), 1000)
	writeRandom(t, filepath.Join(src, "three"), 3<<20)
	os.Chmod(root, 0o777) // --user-quota keeps its counts in root/.gridlink-quota
	serve := x.serve("das3d-n2", root, true, "--user-quota", "4M")
	out := openDir(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"xfer-das3d-n2:missing", out}, "no such file or directory"},
		{[]string{"xfer-das3d-n2:secret", out}, "permission denied"},
		{[]string{"xfer-das3d-n2:../etc/passwd", out}, "escapes the root"},
		{[]string{"xfer-das3d-n2:/etc/passwd", out}, "absolute path"},
		{[]string{filepath.Join(src, "three"), "xfer-das3d-n2:ro/three"}, "permission denied"},
		{[]string{filepath.Join(src, "three"), "xfer-das3d-n2:small/three"}, "bytes free on the file system of small (2097152 bytes"},
		{[]string{"xfer-das3d-n2:.gridlink-quota", out}, "reserved for the service's quota state"},
		{[]string{filepath.Join(src, "three"), "xfer-das3d-n2:../three"}, "escapes the root"},
	} {
		r, err := x.cp("das3v-n1", c.args...)
		msg := r.Failure
		if len(r.Errors) > 0 {
			msg = r.Errors[0].Error
		}
		if err == nil || !strings.Contains(msg, c.want) || r.Files != 0 {
			t.Errorf("cp %v: %v, %+v; want a failure with %q", c.args, err, r, c.want)
		}
		if serve.ProcessState != nil {
			t.Fatalf("the service stopped after cp %v", c.args)
		}
	}
	for _, p := range []string{filepath.Join(out, "missing"), filepath.Join(out, "secret"), filepath.Join(root, "ro/three"), filepath.Join(small, "three"),
		filepath.Join(small, ".three.gridlink-part"), filepath.Join(filepath.Dir(root), "three")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists after a failed copy", p)
		}
	}
	if r, err := x.cp("das3v-n1", "xfer-das3d-n2:ok", out); err != nil || r.Files != 1 {
		t.Errorf("the service does not serve after bad input: %+v %v", r, err)
	}
	sameBytes(t, filepath.Join(root, "ok"), filepath.Join(out, "ok"))
	// --user-quota 4M: the failed copies above were given back; alice's
	// first 3 MiB fit, her next are refused before they flow, in words
	if r, err := x.cp("das3v-n1", filepath.Join(src, "three"), "xfer-das3d-n2:rw/q1"); err != nil || r.Files != 1 {
		t.Errorf("a copy within alice's quota: %+v %v", r, err)
	}
	r, err := x.cp("das3v-n1", filepath.Join(src, "three"), "xfer-das3d-n2:rw/q2")
	if err == nil || !strings.Contains(r.Failure, "exceed the 1048576 bytes left of user alice's quota") {
		t.Errorf("a copy over alice's quota: %+v %v", r, err)
	}
	if _, err := os.Stat(filepath.Join(root, "rw/q2")); err == nil {
		t.Error("the copy over the quota stored its file")
	}
	// --limit binds a download too: 3 MiB at 2 MiB/s take about 1.5 s
	r, err = x.cp("das3v-n1", "--limit", "2M", "xfer-das3d-n2:rw/q1", filepath.Join(out, "q1"))
	if err != nil || r.Files != 1 || r.Seconds < 1.2 {
		t.Errorf("a download limited to 2M: %+v %v (want at least 1.2 s)", r, err)
	}
}

// killHalfWay starts cmd and kills it once the partial file part holds
// half of size.
func killHalfWay(t *testing.T, ctx context.Context, cmd *exec.Cmd, part string, size int64) {
	t.Helper()
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		if fi, err := os.Stat(part); err == nil && fi.Size() >= size/2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the copy never reached half way: %s", errb.Bytes())
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	time.Sleep(500 * time.Millisecond) // the service notices the drop and closes the file
}

// xferResumeNewDir (issue 17, item 4): a tree copied to a directory that
// did not exist is killed half way, both ways; cp -r --resume with the
// same arguments continues it in that directory (not anew in DIR/cpsrc,
// since DIR now exists), keeping the partial file's data, and leaves
// neither partial files nor its mark behind.
func xferResumeNewDir(t *testing.T, x *xferLab, src, root string) {
	const size = 24 << 20
	tree := filepath.Join(src, "cpsrc")
	writeRandom(t, filepath.Join(tree, "big"), size)
	writeRandom(t, filepath.Join(tree, "sub", "small"), 1000)
	check := func(how, dst string, r status.Copy, err error) {
		t.Helper()
		if err != nil || r.Files != 2 || r.Failed != 0 {
			t.Fatalf("%s: resume: %+v %v", how, r, err)
		}
		sameBytes(t, filepath.Join(tree, "big"), filepath.Join(dst, "big"))
		sameBytes(t, filepath.Join(tree, "sub", "small"), filepath.Join(dst, "sub", "small"))
		if _, err := os.Stat(filepath.Join(dst, "cpsrc")); err == nil {
			t.Errorf("%s: the resumed copy started again in %s/cpsrc", how, dst)
		}
		if left, _ := filepath.Glob(filepath.Join(dst, ".*")); len(left) > 0 {
			t.Errorf("%s: left behind: %v", how, left)
		}
		t.Logf("%s: the resumed copy kept %d and sent %d of %d bytes in %.2f s", how, r.KeptBytes, r.SentBytes, size+1000, r.Seconds)
		if r.KeptBytes < size/3 || r.SentBytes > size-size/3 {
			t.Errorf("%s: resume kept %d and sent %d of %d bytes: not continued", how, r.KeptBytes, r.SentBytes, size)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// put: das3v-n1 to a new directory of das3d-n1's service
	killHalfWay(t, ctx, x.cpCmd(ctx, "das3v-n1", "-r", "--limit", "12M", tree, "xfer-das3d-n1:newdir"),
		filepath.Join(root, "newdir", ".big.gridlink-part"), size)
	r, err := x.cp("das3v-n1", "-r", "--resume", tree, "xfer-das3d-n1:newdir")
	check("put", filepath.Join(root, "newdir"), r, err)
	// get: from that service to a new local directory
	back := filepath.Join(openDir(t), "back")
	killHalfWay(t, ctx, x.cpCmd(ctx, "das3v-n1", "-r", "--limit", "12M", "xfer-das3d-n1:newdir", back),
		filepath.Join(back, ".big.gridlink-part"), size)
	r, err = x.cp("das3v-n1", "-r", "--resume", "xfer-das3d-n1:newdir", back)
	check("get", back, r, err)
}
