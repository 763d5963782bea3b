package gridlink

import (
	"context"
	"errors"
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

// A third-party transfer in a grid with a CA, on loopback: service a-data
// pushes to b-data, which admits only alice. The push succeeds when alice
// asks (a-data dials as her delegated proxy), fails when bob asks, and
// a-data cannot reach b-data as itself. The delegated proxy reaches
// nothing but transfer services.
func TestDelegatedPush(t *testing.T) {
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
	node := func(name string, creds *pki.Credentials) (vconn.Config, *vconn.Node) {
		cfg := vconn.Config{Name: name, Creds: creds, ListenAddr: "127.0.0.1", Hubs: []string{h.Addr().String()}}
		n, err := vconn.Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return cfg, n
	}
	serve := func(n *vconn.Node, root string, cfg xfer.Config, allow func(pki.Peer) error) {
		cfg.Root = root
		s, err := xfer.NewServer(cfg)
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
		t.Cleanup(func() { scancel(); l.Close(); <-done; s.Close() })
	}

	rootA, rootB := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(rootA, "data"), []byte(strings.Repeat("physics\n", 100000)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, nodeB := node("b-data", g.Member(t, ca.Node, "b-data"))
	serve(nodeB, rootB, xfer.Config{}, pki.Members([]string{"alice"}, nil))
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
	cfgA, nodeA := node("a-data", g.Member(t, ca.Node, "a-data"))
	var mu sync.Mutex
	var delegated []*proxy.Credential
	push := PushDialer(apiConfig(cfgA), apiNode(nodeA, cfgA), 4)
	serve(nodeA, rootA, xfer.Config{Delegation: xfer.ProxyDelegation{},
		Push: func(ctx context.Context, target string, l xfer.Link, cred *proxy.Credential) (net.Conn, error) {
			mu.Lock()
			delegated = append(delegated, cred)
			mu.Unlock()
			return push(ctx, target, l, cred)
		}}, nil)

	caller := func(name, group string) (*proxy.Credential, *vconn.Node) {
		p, err := proxy.New(g.User(t, name, group), proxy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		creds, err := pki.FromProxy(p, g.Trust)
		if err != nil {
			t.Fatal(err)
		}
		_, n := node("cp-"+name, creds)
		return p, n
	}
	pushAs := func(name, group, dest string) (xfer.Summary, error) {
		p, n := caller(name, group)
		del, err := delegateTo(ctx, apiNode(n, vconn.Config{}), p, "b-data:2811")
		if err != nil {
			t.Fatal(err)
		}
		dial := func(ctx context.Context) (net.Conn, error) {
			return dialService(ctx, apiNode(n, vconn.Config{}), "a-data:2811", link.Options{})
		}
		return xfer.Push(ctx, dial, []string{"data"}, "b-data:2811", dest, xfer.Link{Streams: 2}, xfer.Options{Delegate: del, Retries: -1})
	}

	// alice: the push runs as her, and b-data admits her.
	if sum, err := pushAs("alice", "physics", "copy"); err != nil || sum.Files != 1 {
		t.Fatalf("alice's push: %+v %v", sum, err)
	}
	a, _ := os.ReadFile(filepath.Join(rootA, "data"))
	b, err := os.ReadFile(filepath.Join(rootB, "copy"))
	if err != nil || string(a) != string(b) {
		t.Fatalf("the pushed copy differs (%d bytes, %v)", len(b), err)
	}
	// bob: b-data refuses him, and says so through a-data to bob.
	_, err = pushAs("bob", "chemistry", "bobs")
	if err == nil || !strings.Contains(err.Error(), "refuses") || !strings.Contains(err.Error(), "bob") {
		t.Errorf("bob's push: %v; want b-data's refusal of bob", err)
	}
	t.Logf("bob: %v", err)
	if _, err := os.Stat(filepath.Join(rootB, "bobs")); err == nil {
		t.Error("bob's push stored a file")
	}
	// a-data as itself: refused too (the verdict comes with the first
	// read), so the delegation is what let alice's push through.
	c, err := link.Dial(ctx, nodeA, "b-data:2811", link.Options{})
	if err == nil {
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if !errors.Is(err, pki.ErrDenied) || !strings.Contains(err.Error(), "refuses a-data") {
		t.Errorf("a-data as itself: %v; want b-data's refusal", err)
	}

	// The delegated proxy: alice's, restricted to the transfer service.
	mu.Lock()
	p := delegated[0]
	mu.Unlock()
	r, err := g.Trust.VerifyCertificates(p.Chain)
	if err != nil || r.Name != "alice" || r.Proxies != 2 || len(r.Restriction) != 1 || r.Restriction[0] != "port-2811@"+nodeB.ID().String() {
		t.Fatalf("the delegated proxy: %+v %v; want alice's second-level proxy restricted to port-2811 at b-data", r, err)
	}
	creds, err := pki.FromProxy(p, g.Trust)
	if err != nil {
		t.Fatal(err)
	}
	_, holder := node("holder", creds)
	vc, err := holder.Dial(ctx, "b-data:9000")
	if err == nil {
		_, err = io.ReadAll(vc)
		vc.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "restricted to [port-2811 at node "+nodeB.ID().Short()+"]") {
		t.Errorf("the delegated proxy at b-data:9000: %v; want a refusal naming its restriction", err)
	}
}
