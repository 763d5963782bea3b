package gridlink

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/keyfile"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
)

// fileGrid is a grid with a CA made by the API from files, as `gridlink
// ca init`, `cert issue` and `proxy init` make them: a hub (site, its log
// in hubLog) on loopback, and alice's proxy file.
type fileGrid struct {
	dir, ca, crl, proxy string
	hub                 *Hub
	hubLog              *testwait.Log
}

func newFileGrid(t *testing.T) *fileGrid {
	t.Helper()
	g := &fileGrid{dir: t.TempDir(), hubLog: new(testwait.Log)}
	f, err := InitCA(CAConfig{Dir: filepath.Join(g.dir, "ca"), Name: "testgrid"})
	if err != nil {
		t.Fatal(err)
	}
	g.ca, g.crl = f.Cert, f.CRL
	g.issue(t, "hub", "site")
	g.issue(t, "user", "alice")
	// as `proxy init` makes it, for an Ed25519 key (a node's identity as
	// it is, whatever key type proxy init gives)
	data, err := os.ReadFile(g.file("alice.pem"))
	if err != nil {
		t.Fatal(err)
	}
	chain, err := ca.ParseCertificates(data)
	if err != nil {
		t.Fatal(err)
	}
	key, err := keyfile.Load(g.file("alice.key"), nil)
	if err != nil {
		t.Fatal(err)
	}
	g.proxy = filepath.Join(g.dir, "proxy.pem")
	if err := proxy.Save(g.proxy, ed25519Proxy(t, &proxy.Credential{Chain: chain, Key: key}, proxy.Options{Lifetime: time.Hour})); err != nil {
		t.Fatal(err)
	}
	g.hub = serveHub(t, HubConfig{KeyFile: g.file("site.key"), Credentials: Credentials{CA: g.ca, CRL: g.crl, Cert: g.file("site.pem")},
		Logger: slog.New(slog.NewTextHandler(g.hubLog, nil))})
	return g
}

// ed25519Proxy is a proxy of issuer for a new Ed25519 key.
func ed25519Proxy(t *testing.T, issuer *proxy.Credential, o proxy.Options) *proxy.Credential {
	t.Helper()
	key, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := proxy.Issue(issuer, key.Private().Public(), o)
	if err != nil {
		t.Fatal(err)
	}
	return &proxy.Credential{Chain: append([]*x509.Certificate{cert}, issuer.Chain...), Key: key.Private()}
}

func (g *fileGrid) file(name string) string { return filepath.Join(g.dir, name) }

// issue certifies NAME.key (made) as role's, in NAME.pem.
func (g *fileGrid) issue(t *testing.T, role, name string) {
	t.Helper()
	if _, err := IssueCert(CertRequest{Dir: filepath.Join(g.dir, "ca"), Role: role, Name: name, KeyFile: g.file(name + ".key"), Out: g.file(name + ".pem"), Lifetime: time.Hour}); err != nil {
		t.Fatal(err)
	}
}

// config is a node's configuration with proxy file p, on the hub.
func (g *fileGrid) config(name, p string) Config {
	return Config{Name: name, Credentials: Credentials{CA: g.ca, CRL: g.crl, Proxy: p}, Hubs: []string{g.hub.Addr().String()}, ListenAddr: "127.0.0.1"}
}

// nodeConfig is node name's configuration, its key and certificate.
func (g *fileGrid) nodeConfig(t *testing.T, name string) Config {
	g.issue(t, "node", name)
	c := g.config(name, "")
	c.KeyFile, c.Credentials.Cert = g.file(name+".key"), g.file(name+".pem")
	return c
}

// serve runs a transfer service at node name admitting alice only.
func (g *fileGrid) serve(ctx context.Context, t *testing.T, name string, log *testwait.Log) (root string) {
	t.Helper()
	cfg := g.nodeConfig(t, name)
	n, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	root = t.TempDir()
	s, err := ServeTransfers(n, cfg, ServeConfig{Root: root, Allow: []string{"alice"}, Logf: log.Logf})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	sctx, cancel := context.WithCancel(context.Background())
	go func() { _ = s.Serve(sctx); close(done) }()
	t.Cleanup(func() { cancel(); s.Close(); <-done; n.Close() })
	return root
}

// Issue 33, its consequence: alice's agent runs with her proxy, and two
// copies with the same proxy file run at once (a put, and a push
// delegated from the file), as two gridlink cp or two dashboard
// transfers do. Each copy's node has an identity of its own (a proxy of
// her proxy, made in memory), so the hub refuses none and evicts none,
// and the agent keeps its attachment; the services, which admit alice
// only, admit both as her.
func TestOneShotNodesOwnIdentity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := newFileGrid(t)
	var svcLog testwait.Log
	rootA := g.serve(ctx, t, "a-data", &svcLog)
	rootB := g.serve(ctx, t, "b-data", &svcLog)
	agent, err := Start(ctx, g.config("alice-agent", g.proxy))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	pc, err := proxy.Load(g.proxy)
	if err != nil {
		t.Fatal(err)
	}
	if agent.ID() != idOfProxy(t, pc) {
		t.Fatalf("the agent's node %s is not the proxy's identity", agent.ID().Short())
	}

	data := strings.Repeat("physics\n", 100000)
	local := filepath.Join(t.TempDir(), "data")
	for _, f := range []string{local, filepath.Join(rootA, "data")} {
		if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// both copies' nodes are up at once: each waits at its start for the
	// other's, and meanwhile the hub's nodes are read
	var started sync.WaitGroup
	started.Add(2)
	both := make(chan struct{})
	go func() { started.Wait(); close(both) }()
	var nodes []Machine
	var once sync.Once
	copyAs := func(name string, srcs []string, dst string) error {
		plan, err := PlanCopy(srcs, dst)
		if err != nil {
			return err
		}
		cc := CopyConfig{Node: g.config(name, g.proxy), ProxyFile: g.proxy, Retries: -1, Progress: func(e CopyEvent) {
			if _, ok := e.(CopyStarted); !ok {
				return
			}
			started.Done()
			select {
			case <-both:
				once.Do(func() { nodes = g.hub.Status().Nodes })
			case <-ctx.Done():
			}
		}}
		_, err = Copy(ctx, cc, plan)
		return err
	}
	errs := make(chan error, 2)
	go func() { errs <- copyAs("cp-1", []string{local}, "b-data:one") }()
	go func() { errs <- copyAs("cp-2", []string{"a-data:data"}, "b-data:two") }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("a copy: %v", err)
		}
	}
	for _, f := range []string{"one", "two"} {
		if b, err := os.ReadFile(filepath.Join(rootB, f)); err != nil || string(b) != data {
			t.Errorf("b-data's %s: %d bytes, %v", f, len(b), err)
		}
	}

	ids := map[string]ID{}
	for _, m := range nodes {
		ids[m.Name] = m.ID
	}
	seen := map[ID]string{}
	for _, name := range []string{"alice-agent", "cp-1", "cp-2"} {
		id, ok := ids[name]
		if !ok {
			t.Errorf("the hub did not have node %s while both copies ran: %v", name, nodes)
			continue
		}
		if other, dup := seen[id]; dup {
			t.Errorf("nodes %s and %s have one identity, %s", other, name, id.Short())
		}
		seen[id] = name
	}
	if err := agent.Attached(); err != nil {
		t.Errorf("the agent's node lost its hub: %v", err)
	}
	for _, bad := range []string{"refused", "replaced", "gone silent"} {
		if strings.Contains(g.hubLog.String(), bad) {
			t.Errorf("the hub's log says %q:\n%s", bad, g.hubLog)
		}
	}
	if strings.Contains(svcLog.String(), "refused") {
		t.Errorf("a service refused a copy:\n%s", svcLog.String())
	}
}

// idOfProxy is the node ID a proxy's key gives.
func idOfProxy(t *testing.T, p *proxy.Credential) ID {
	t.Helper()
	k, err := pki.ProxyKey(p)
	if err != nil {
		t.Fatal(err)
	}
	return k.ID()
}

// A one-shot node that cannot have an identity of its own has the one it
// was given, and the hub's refusal while another process holds it says
// why, in one line: a proxy whose path length allows no proxy below it,
// a node's key, a key in an open grid. The hub logs the refusal too.
func TestOneShotSharedIdentityRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := newFileGrid(t)
	pc, err := proxy.Load(g.proxy)
	if err != nil {
		t.Fatal(err)
	}
	last := ed25519Proxy(t, pc, proxy.Options{LimitPath: true, PathLen: 0, Lifetime: 30 * time.Minute})
	lastFile := g.file("last.pem")
	if err := proxy.Save(lastFile, last); err != nil {
		t.Fatal(err)
	}
	node := g.nodeConfig(t, "n1")
	openLog := new(testwait.Log)
	openHub := serveHub(t, HubConfig{Name: "open", Logger: slog.New(slog.NewTextHandler(openLog, nil))})
	open := Config{Name: "n2", KeyFile: g.file("n2.key"), Hubs: []string{openHub.Addr().String()}, ListenAddr: "127.0.0.1"}
	for _, c := range []struct {
		what   string
		cfg    Config
		hubLog *testwait.Log
		words  []string
	}{
		{"a proxy of path length 0", g.config("last", lastFile), g.hubLog, []string{"could not have an identity of its own", "its proxy " + lastFile + " may sign no proxy", "path length constraint of 0", "gridlink proxy init"}},
		{"a node key", node, g.hubLog, []string{"the node key " + node.KeyFile + " is one identity", "--proxy"}},
		{"a key in an open grid", open, openLog, []string{"the node key " + open.KeyFile + " is one identity", "without it (no --key: a fresh key"}},
	} {
		t.Run(c.what, func(t *testing.T) {
			holder, err := Start(ctx, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			n, err := StartAttached(ctx, c.cfg)
			if err == nil {
				n.Close()
				t.Fatal("a one-shot node attached with the identity another process holds")
			}
			var shared *SharedIdentityError
			if !errors.Is(err, ErrIdentityAttached) || !errors.As(err, &shared) {
				t.Errorf("the one-shot node: %v; want ErrIdentityAttached and a *SharedIdentityError", err)
			}
			if c.cfg.Credentials.Proxy != "" && !errors.Is(err, proxy.ErrNoProxyLeft) {
				t.Errorf("the one-shot node: %v; want proxy.ErrNoProxyLeft", err)
			}
			for _, want := range append([]string{"another process with this identity", "stop the other process"}, c.words...) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal %q does not say %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("the refusal is more than one line: %q", err)
			}
			c.hubLog.Line(t, "refused: another process with this identity", fmt.Sprintf("(%s)", holder.ID().Short()))
			if err := holder.Attached(); err != nil {
				t.Errorf("the holder lost its hub: %v", err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// The child proxy a one-shot node makes narrows only: alice's (her
// subject, as services judge it), restricted as its parent is, a fresh
// key, signing nothing, valid to its parent's end (5 days: a long copy
// reconnects as long as the parent would have let it) and no longer.
func TestChildProxy(t *testing.T) {
	g := pkitest.New(t, "testgrid")
	user := g.User(t, "alice", "physics")
	for _, o := range []proxy.Options{{Restrict: []string{"port-2811"}, Lifetime: 3 * time.Hour}, {Lifetime: 5 * 24 * time.Hour}} {
		parent := ed25519Proxy(t, user, o)
		creds, err := pki.FromProxy(parent, g.Trust)
		if err != nil {
			t.Fatal(err)
		}
		child, err := childProxy(creds)
		if err != nil {
			t.Fatal(err)
		}
		self, err := child.Self()
		if err != nil {
			t.Fatal(err)
		}
		r := self.Chain
		if r.Name != "alice" || r.Subject() != user.Leaf().Subject.String() || r.Proxies != 2 || fmt.Sprint(r.Restriction) != fmt.Sprint(o.Restrict) {
			t.Errorf("the child of %+v proves %+v; want alice's second proxy restricted as its parent", o, r)
		}
		if child.Key.ID() == creds.Key.ID() {
			t.Error("the child has its parent's key")
		}
		leaf := r.Leaf
		if !leaf.NotAfter.Equal(parent.Leaf().NotAfter) || leaf.NotBefore.Before(parent.Leaf().NotBefore) {
			t.Errorf("the child is valid %v to %v, its parent %v to %v", leaf.NotBefore, leaf.NotAfter, parent.Leaf().NotBefore, parent.Leaf().NotAfter)
		}
		if _, err := proxy.New(&proxy.Credential{Chain: append([]*x509.Certificate{leaf}, parent.Chain...), Key: child.Key.Private()}, proxy.Options{}); !errors.Is(err, proxy.ErrNoProxyLeft) {
			t.Errorf("the child signed a proxy: %v", err)
		}
	}
}
