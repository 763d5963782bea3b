package xfer

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// start runs a service on root until the returned stop is called (or the
// test ends): a restart is a stop and a start on the same root.
func start(t *testing.T, cfg Config) (Dialer, func()) {
	t.Helper()
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		s.Close()
	}
	t.Cleanup(stop)
	addr := l.Addr().String()
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}, stop
}

func alice(net.Conn) string { return "alice" }

// A user's count survives a restart of the service: what alice stored
// before still counts, and her next put over the quota is refused (before,
// the counts started from zero at every start). Re-sending her own file
// costs nothing more (a replaced file counts its new size less the old).
func TestQuotaRestart(t *testing.T) {
	const kib = 1 << 10
	src, root := t.TempDir(), t.TempDir()
	for _, n := range []string{"a", "b"} {
		randomFile(t, filepath.Join(src, n), 600*kib, 0o644)
	}
	var logs logLines
	cfg := Config{Root: root, UserQuota: 1000 * kib, User: alice, Logf: logs.add}
	dial, stop := start(t, cfg)
	logs.wait(t, 0, StateFile+": no such file: every user's count starts at zero")
	if _, err := Put(ctx, dial, []string{filepath.Join(src, "a")}, "a", Options{Retries: -1}); err != nil {
		t.Fatal(err)
	}
	stop()
	fi, err := os.Stat(filepath.Join(root, StateFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the state file: %v %v, want mode 0600", fi, err)
	}
	var st quotaState
	if b, err := os.ReadFile(filepath.Join(root, StateFile)); err != nil || json.Unmarshal(b, &st) != nil || st.Users["alice"] != 600*kib {
		t.Errorf("the state file says %+v (%v), want alice's 614400 bytes", st, err)
	}

	dial, _ = start(t, cfg) // the restart
	_, err = Put(ctx, dial, []string{filepath.Join(src, "b")}, "b", Options{Retries: -1})
	var re *RefusedError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "exceed the 409600 bytes left of user alice's quota") {
		t.Errorf("after a restart, a put over alice's quota: %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(root, "b")); err == nil {
		t.Error("the put over the quota stored its file")
	}
	randomFile(t, filepath.Join(src, "a"), 600*kib, 0o644) // new content, same size
	if _, err := Put(ctx, dial, []string{filepath.Join(src, "a")}, "a", Options{Retries: -1}); err != nil {
		t.Errorf("alice replacing her own file with one of the same size: %v", err)
	}
	sameFile(t, filepath.Join(src, "a"), filepath.Join(root, "a"))
}

// The service's quota counts what the served tree already holds: a put
// that would take it over is refused (before, only what the service
// stored since it started counted).
func TestQuotaTree(t *testing.T) {
	const kib = 1 << 10
	src, root := t.TempDir(), t.TempDir()
	randomFile(t, filepath.Join(root, "old", "data"), 1000*kib, 0o644)
	randomFile(t, filepath.Join(src, "a"), 600*kib, 0o644)
	randomFile(t, filepath.Join(src, "small"), 400*kib, 0o644)
	var logs logLines
	dial, _ := start(t, Config{Root: root, Quota: 1500 * kib, Logf: logs.add})
	logs.wait(t, 0, "holds 1024000 bytes in 1 files (measured in")
	_, err := Put(ctx, dial, []string{filepath.Join(src, "a")}, "a", Options{Retries: -1})
	if !strings.Contains(errString(err), "exceed the 512000 bytes left of this service's quota") {
		t.Errorf("a put over what the tree leaves of the quota: %v, want a refusal", err)
	}
	if _, err := Put(ctx, dial, []string{filepath.Join(src, "small")}, "small", Options{Retries: -1}); err != nil {
		t.Fatal(err)
	}
	// replacing a file counts its new size less the old: 400 KiB by 400 KiB
	// leaves the 100 KiB left as they were
	if _, err := Put(ctx, dial, []string{filepath.Join(src, "small")}, "small", Options{Retries: -1}); err != nil {
		t.Errorf("replacing a file with one of its size: %v", err)
	}
	_, err = Put(ctx, dial, []string{filepath.Join(src, "small")}, "again", Options{Retries: -1})
	if !strings.Contains(errString(err), "exceed the 102400 bytes left of this service's quota") {
		t.Errorf("a put over what is left: %v, want a refusal", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// A corrupt state file stops the service from starting, naming the file
// (the counts are never reset silently); a missing one is logged.
func TestQuotaStateCorrupt(t *testing.T) {
	root := t.TempDir()
	for _, bad := range []string{"", "{", `{"version":1,"users":{"alice":-5}}`, `{"version":2,"users":{}}`, `{"version":1,"users":{},"x":1}`, `{"version":1} {}`} {
		os.WriteFile(filepath.Join(root, StateFile), []byte(bad), 0o600)
		s, err := NewServer(Config{Root: root, UserQuota: 1 << 20})
		var qe *QuotaStateError
		if !errors.As(err, &qe) || qe.Path != filepath.Join(root, StateFile) || !strings.Contains(err.Error(), filepath.Join(root, StateFile)+": corrupt") {
			t.Errorf("state %q: %v, want a QuotaStateError naming the file", bad, err)
		}
		if s != nil {
			s.Close()
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, StateFile)); string(b) != `{"version":1} {}` {
		t.Errorf("a refused start rewrote the state file: %q", b)
	}
}

// A client can neither read nor write the state file, by its name or
// through a directory listing: the service refuses in words, and logs it.
func TestQuotaStatePrivate(t *testing.T) {
	src, root, out := t.TempDir(), t.TempDir(), t.TempDir()
	const state = `{"version":1,"users":{"alice":5}}`
	os.WriteFile(filepath.Join(root, StateFile), []byte(state), 0o600)
	randomFile(t, filepath.Join(root, "f"), 100, 0o644)
	randomFile(t, filepath.Join(src, StateFile), 100, 0o644)
	randomFile(t, filepath.Join(src, "d", StateFile+".tmp"), 100, 0o644)
	var logs logLines
	dial, _ := start(t, Config{Root: root, UserQuota: 1 << 20, User: alice, Logf: logs.add})
	for _, p := range []string{StateFile, "./" + StateFile, "x/../" + StateFile, StateFile + ".tmp"} {
		n := len(logs.all())
		_, err := Get(ctx, dial, []string{p}, out, Options{Retries: -1})
		var re *RefusedError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), "reserved for the service's quota state") {
			t.Errorf("get %s: %v, want a refusal", p, err)
		}
		logs.wait(t, n, "reserved for the service's quota state")
	}
	if _, err := Get(ctx, dial, []string{"."}, filepath.Join(out, "all"), Options{Recursive: true, Retries: -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "all", "f")); err != nil {
		t.Errorf("get -r .: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "all", StateFile)); err == nil {
		t.Error("get -r . copied the state file")
	}
	_, err := Put(ctx, dial, []string{filepath.Join(src, StateFile)}, StateFile, Options{Retries: -1})
	if !strings.Contains(errString(err), "reserved for the service's quota state") {
		t.Errorf("put as %s: %v, want a refusal", StateFile, err)
	}
	sum, _ := Put(ctx, dial, []string{filepath.Join(src, StateFile)}, ".", Options{Retries: -1})
	if len(sum.Errors) != 1 || !strings.Contains(sum.Errors[0].Error, StateFile+": reserved for the service's quota state") {
		t.Errorf("put into the root of a file named %s: %+v, want it refused", StateFile, sum)
	}
	sum, _ = Put(ctx, dial, []string{filepath.Join(src, "d")}, ".", Options{Recursive: true, Retries: -1})
	if len(sum.Errors) != 1 || !strings.Contains(sum.Errors[0].Error, "d/"+StateFile+".tmp: reserved") {
		t.Errorf("put -r of a tree holding %s.tmp: %+v, want it refused", StateFile, sum)
	}
	if b, _ := os.ReadFile(filepath.Join(root, StateFile)); string(b) == "" || strings.Contains(string(b), "\x00") {
		t.Errorf("the state file: %q", b)
	}
	var st quotaState
	if b, _ := os.ReadFile(filepath.Join(root, StateFile)); json.Unmarshal(b, &st) != nil || st.Users["alice"] != 5 {
		t.Errorf("the state file was written by a client: %q", b)
	}
}
