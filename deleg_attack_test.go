package gridlink

import (
	"context"
	"fmt"
	"io"
	"net"
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

// logBuf collects a node's log lines.
type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (b *logBuf) logf(format string, args ...any) {
	b.mu.Lock()
	b.lines = append(b.lines, fmt.Sprintf(format, args...))
	b.mu.Unlock()
}

func (b *logBuf) has(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range b.lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// A malicious source service keeps the proxy alice delegates to it for a
// push to b-data (issue 16, hole 3), and tries it elsewhere. It reaches
// (a) b-data's transfer service, as alice meant; it is refused by (b)
// c-data's transfer service, which also admits alice and holds her private
// file (neither read nor written), and (c) another service of b-data;
// each refusal is named alike in the refusing node's log and the thief's
// error. Before targets were named, (b) let the thief read and write as
// alice at every transfer service of the grid.
func TestStolenDelegatedProxyStaysWithTarget(t *testing.T) {
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
	logs := map[string]*logBuf{}
	node := func(name string, creds *pki.Credentials) (vconn.Config, *vconn.Node) {
		logs[name] = &logBuf{}
		cfg := vconn.Config{Name: name, Creds: creds, ListenAddr: "127.0.0.1", Hubs: []string{h.Addr().String()}, Logf: logs[name].logf}
		n, err := vconn.Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return cfg, n
	}
	serve := func(n *vconn.Node, root string, cfg xfer.Config) {
		cfg.Root = root
		s, err := xfer.NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		l, err := link.Listen(n, xfer.Port, link.ListenOptions{Allow: pki.Members([]string{"alice"}, nil)})
		if err != nil {
			t.Fatal(err)
		}
		sctx, scancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = s.Serve(sctx, l); close(done) }()
		t.Cleanup(func() { scancel(); l.Close(); <-done; s.Close() })
	}

	rootA, rootB, rootC := t.TempDir(), t.TempDir(), t.TempDir()
	write := func(path, text string) {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(rootA, "data"), strings.Repeat("physics\n", 1000))
	write(filepath.Join(rootC, "secret"), "alice's private notes\n")
	_, nodeB := node("b-data", g.Member(t, ca.Node, "b-data"))
	serve(nodeB, rootB, xfer.Config{})
	other, err := nodeB.Listen(9000) // another service of b-data
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, nodeC := node("c-data", g.Member(t, ca.Node, "c-data"))
	serve(nodeC, rootC, xfer.Config{})

	// a-data pushes as asked, and keeps the proxy.
	cfgA, nodeA := node("a-data", g.Member(t, ca.Node, "a-data"))
	stolen := make(chan *proxy.Credential, 1)
	push := PushDialer(apiConfig(cfgA), apiNode(nodeA, cfgA), 4)
	serve(nodeA, rootA, xfer.Config{Delegation: xfer.ProxyDelegation{},
		Push: func(ctx context.Context, target string, l xfer.Link, cred *proxy.Credential) (net.Conn, error) {
			select {
			case stolen <- cred:
			default:
			}
			return push(ctx, target, l, cred)
		}})

	// alice pushes a-data:data to b-data:copy, as gridlink cp does.
	alice, err := proxy.New(g.User(t, "alice", "physics"), proxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	aliceCreds, err := pki.FromProxy(alice, g.Trust)
	if err != nil {
		t.Fatal(err)
	}
	_, cp := node("cp-alice", aliceCreds)
	del, err := delegateTo(ctx, apiNode(cp, vconn.Config{}), alice, "b-data:2811")
	if err != nil {
		t.Fatal(err)
	}
	dialA := func(ctx context.Context) (net.Conn, error) {
		return dialService(ctx, apiNode(cp, vconn.Config{}), "a-data:2811", link.Options{})
	}
	if sum, err := xfer.Push(ctx, dialA, []string{"data"}, "b-data:2811", "copy", xfer.Link{Streams: 2}, xfer.Options{Delegate: del, Retries: -1}); err != nil || sum.Files != 1 {
		t.Fatalf("alice's push: %+v %v", sum, err)
	}

	// The thief: a node of a-data's whose identity is the kept proxy.
	thiefCreds, err := pki.FromProxy(<-stolen, g.Trust)
	if err != nil {
		t.Fatal(err)
	}
	_, thief := node("a-data-thief", thiefCreds)
	dial := func(target string) xfer.Dialer {
		return func(ctx context.Context) (net.Conn, error) {
			return dialService(ctx, apiNode(thief, vconn.Config{}), target, link.Options{})
		}
	}

	// (a) b-data's transfer service: admitted, as alice meant.
	got := t.TempDir()
	if _, err := xfer.Get(ctx, dial("b-data:2811"), []string{"copy"}, got, xfer.Options{Retries: -1}); err != nil {
		t.Fatalf("the proxy at its target b-data:2811: %v", err)
	}

	// (b) c-data's transfer service: refused, for reading and for writing.
	why := "may not use port-2811 at c-data: its proxy is restricted to [port-2811 at node " + nodeB.ID().Short() + "], and this node is " + nodeC.ID().Short()
	_, err = xfer.Get(ctx, dial("c-data:2811"), []string{"secret"}, got, xfer.Options{Retries: -1})
	t.Logf("the thief reading at c-data: %v", err)
	if err == nil || !strings.Contains(err.Error(), why) {
		t.Errorf("reading alice's file at c-data with the stolen proxy: %v; want the refusal %q", err, why)
	}
	if _, err := os.Stat(filepath.Join(got, "secret")); err == nil {
		t.Error("the stolen proxy read alice's file at c-data")
	}
	write(filepath.Join(rootA, "planted"), "from the thief\n")
	_, err = xfer.Put(ctx, dial("c-data:2811"), []string{filepath.Join(rootA, "planted")}, "planted", xfer.Options{Retries: -1})
	if err == nil || !strings.Contains(err.Error(), why) {
		t.Errorf("planting a file at c-data with the stolen proxy: %v; want the refusal %q", err, why)
	}
	if _, err := os.Stat(filepath.Join(rootC, "planted")); err == nil {
		t.Error("the stolen proxy planted a file at c-data")
	}
	if !logs["c-data"].has(why) {
		t.Errorf("c-data's log does not name the refusal %q: %q", why, logs["c-data"].lines)
	}

	// (c) another service of b-data: refused.
	why = "may not use port-9000 at b-data: its proxy is restricted to [port-2811 at node " + nodeB.ID().Short() + "]"
	vc, err := thief.Dial(ctx, "b-data:9000")
	if err == nil {
		_, err = io.ReadAll(vc)
		vc.Close()
	}
	if err == nil || !strings.Contains(err.Error(), why) {
		t.Errorf("the stolen proxy at b-data:9000: %v; want the refusal %q", err, why)
	}
	if !logs["b-data"].has(why) {
		t.Errorf("b-data's log does not name the refusal %q", why)
	}
}
