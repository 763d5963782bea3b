package xfer

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/status"
)

// op is the server's count of op's sessions with outcome.
func op(t *testing.T, s *Server, name, outcome string) status.TransferOp {
	t.Helper()
	for _, o := range s.Counters().Ops {
		if o.Op == name && o.Outcome == outcome {
			return o
		}
	}
	t.Fatalf("no count of %s %s", name, outcome)
	return status.TransferOp{}
}

// A server counts each session as it ends: a put and a get that worked
// with their files and bytes, a get of a missing file with its failed
// entry; every operation and outcome is listed.
func TestServerCounters(t *testing.T) {
	root, local := t.TempDir(), t.TempDir()
	dial, s := service(t, Config{Root: root})
	randomFile(t, filepath.Join(local, "f"), 1000, 0o644)
	ctx := context.Background()
	if _, err := Put(ctx, dial, []string{filepath.Join(local, "f")}, ".", Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Get(ctx, dial, []string{"f"}, filepath.Join(local, "g"), Options{}); err != nil {
		t.Fatal(err)
	}
	if sum, _ := Get(ctx, dial, []string{"missing"}, filepath.Join(local, "h"), Options{}); sum.Failed != 1 {
		t.Fatalf("a get of a missing file: %+v; want it failed", sum)
	}
	// the server counts a session after its last message: the client
	// may have returned a moment before
	testwait.Until(t, "the server to count the three sessions", 10*time.Second, func() bool {
		n := uint64(0)
		for _, o := range s.Counters().Ops {
			n += o.Sessions
		}
		return n == 3
	})
	if o := op(t, s, "put", "ok"); o.Sessions != 1 || o.Files != 1 || o.SentBytes != 1000 || o.Failed != 0 {
		t.Errorf("put ok: %+v; want 1 session, 1 file, 1000 bytes", o)
	}
	ok, failed := op(t, s, "get", "ok"), op(t, s, "get", "failed")
	if ok.Sessions+failed.Sessions != 2 || ok.Files != 1 || ok.SentBytes != 1000 || ok.Failed+failed.Failed != 1 {
		t.Errorf("gets: ok %+v, failed %+v; want 2 sessions, 1 file of 1000 bytes, 1 entry failed", ok, failed)
	}
	for _, m := range s.Counters().Moved {
		if want := map[string]uint64{"get": 1000, "put": 1000, "push": 0}[m.Op]; m.Bytes != want {
			t.Errorf("%s moved %d bytes; want %d", m.Op, m.Bytes, want)
		}
	}
	if n := len(s.Counters().Ops); n != 6 {
		t.Errorf("%d operation counts; want 6 (get, put, push; ok, failed)", n)
	}
}
