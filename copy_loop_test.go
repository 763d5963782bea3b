package gridlink

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
	"github.com/gridlink/gridlink/vconn"
	"github.com/gridlink/gridlink/xfer"
)

// Copy on loopback in a grid with a CA, as gridlink cp runs it: alice
// puts a file to a-data, gets it back, and has a-data push it to b-data
// (which admits only her) as her delegated proxy; the events tell the
// steps, and the result the link. A push without a proxy to delegate
// from fails before any node starts, with ErrNoDelegator.
func TestCopyPutGetPush(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := pkitest.New(t, "testgrid")
	h, err := hubserver.New(hubserver.Config{Name: "hub", Creds: g.Member(t, ca.Hub, "hub"), Listen: "127.0.0.1:0", Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hctx, hcancel := context.WithCancel(context.Background())
	hdone := make(chan struct{})
	go func() { _ = h.Serve(hctx); close(hdone) }()
	defer func() { hcancel(); <-hdone }()
	hubs := []string{h.Addr().String()}
	serve := func(name, root string, allow func(pki.Peer) error) {
		cfg := vconn.Config{Name: name, Creds: g.Member(t, ca.Node, name), ListenAddr: "127.0.0.1", Hubs: hubs}
		n, err := vconn.Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		s, err := xfer.NewServer(xfer.Config{Root: root, Delegation: xfer.ProxyDelegation{}, Push: PushDialer(apiConfig(cfg), apiNode(n, cfg), 4)})
		if err != nil {
			t.Fatal(err)
		}
		l, err := link.Listen(n, xfer.Port, link.ListenOptions{Allow: allow})
		if err != nil {
			t.Fatal(err)
		}
		sctx, scancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = s.Serve(sctx, l); close(done) }()
		t.Cleanup(func() { scancel(); l.Close(); <-done; s.Close(); n.Close() })
	}
	rootA, rootB, local := t.TempDir(), t.TempDir(), t.TempDir()
	serve("a-data", rootA, nil)
	serve("b-data", rootB, pki.Members([]string{"alice"}, nil))

	alice, err := proxy.New(g.User(t, "alice", "physics"), proxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := pki.FromProxy(alice, g.Trust)
	if err != nil {
		t.Fatal(err)
	}
	aliceFile := filepath.Join(t.TempDir(), "alice.pem")
	if err := proxy.Save(aliceFile, alice); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []CopyEvent
	cc := CopyConfig{Node: apiConfig(vconn.Config{Name: "cp-alice", Creds: creds, ListenAddr: "127.0.0.1", Hubs: hubs}), ProxyFile: aliceFile,
		Link: LinkOptions{Streams: 2}, Retries: -1, Progress: func(e CopyEvent) { mu.Lock(); events = append(events, e); mu.Unlock() }}
	run := func(srcs []string, dst string, kind CopyKind) CopyResult {
		t.Helper()
		plan, err := PlanCopy(srcs, dst)
		if err != nil || plan.Kind != kind {
			t.Fatalf("PlanCopy(%q, %q): %+v %v", srcs, dst, plan, err)
		}
		res, err := Copy(ctx, cc, plan)
		if err != nil || res.Files != 1 || res.Interrupted {
			t.Fatalf("copy %q to %q: %+v %v", srcs, dst, res, err)
		}
		return res
	}
	data := strings.Repeat("physics\n", 100000)
	if err := os.WriteFile(filepath.Join(local, "data"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}

	res := run([]string{filepath.Join(local, "data")}, "a-data:in", CopyPut)
	if res.Method == "" || res.Streams == 0 || res.Bytes != int64(len(data)) {
		t.Errorf("put: %+v; want the link's method and streams, and the bytes", res)
	}
	mu.Lock()
	if len(events) < 4 || events[0] != (CopyStarted{Kind: CopyPut, Node: "cp-alice"}) || events[1] != (CopyPlanned{Files: 1, Bytes: int64(len(data))}) {
		t.Errorf("put's events: %+v", events)
	}
	if d, ok := events[len(events)-1].(FileDone); !ok || d.Err != "" || d.Size != int64(len(data)) {
		t.Errorf("put's last event: %+v; want its file done", events[len(events)-1])
	}
	mu.Unlock()
	run([]string{"a-data:in"}, filepath.Join(local, "back"), CopyGet)
	run([]string{"a-data:in"}, "b-data:copy", CopyPush)
	for _, f := range []string{filepath.Join(rootA, "in"), filepath.Join(local, "back"), filepath.Join(rootB, "copy")} {
		if b, err := os.ReadFile(f); err != nil || string(b) != data {
			t.Errorf("%s: %d bytes, %v", f, len(b), err)
		}
	}

	cc.ProxyFile = ""
	mu.Lock()
	events = nil
	mu.Unlock()
	plan, _ := PlanCopy([]string{"a-data:in"}, "b-data:again")
	if _, err := Copy(ctx, cc, plan); !errors.Is(err, ErrNoDelegator) || len(events) != 0 {
		t.Errorf("a push without a proxy: %v, events %+v; want ErrNoDelegator before the copy starts", err, events)
	}
}
