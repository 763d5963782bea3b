package gridlink

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
)

// serveHub runs a hub on loopback until the test ends.
func serveHub(t *testing.T, cfg HubConfig) *Hub {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	h, err := NewHub(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

// A grid with a CA, made by the API as `gridlink ca init`, `cert issue`
// and `proxy init` make it: a hub and a node started from its files go by
// the names their certificates certify, and the hub's status socket
// reports the node; a revoked certificate is in the list RevokeCA
// re-signs.
func TestGridFromFiles(t *testing.T) {
	dir := t.TempDir()
	gca := filepath.Join(dir, "ca")
	f, err := InitCA(CAConfig{Dir: gca, Name: "testgrid"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := InitCA(CAConfig{Dir: gca, Name: "testgrid"}); !errors.Is(err, ErrCAExists) {
		t.Errorf("a second InitCA in %s: %v; want ErrCAExists", gca, err)
	}
	issue := func(role, name, out string) Issued {
		t.Helper()
		is, err := IssueCert(CertRequest{Dir: gca, Role: role, Name: name, KeyFile: filepath.Join(dir, name+".key"), Out: filepath.Join(dir, out), Lifetime: 24 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return is
	}
	issue("hub", "site", "hub.pem")
	issue("node", "n1", "n1.pem")
	if is := issue("user", "alice", "alice.pem"); is.MadeKey == "" {
		t.Error("IssueCert made no user key for a missing key file")
	}
	if _, err := IssueCert(CertRequest{Dir: gca, Role: "node", Name: "n2", Lifetime: time.Hour, Out: filepath.Join(dir, "n2.pem")}); !errors.Is(err, ErrKeyNeeded) {
		t.Errorf("a node certificate without a key: %v; want ErrKeyNeeded", err)
	}
	p, err := InitProxy(ProxyRequest{CertFile: filepath.Join(dir, "alice.pem"), KeyFile: filepath.Join(dir, "alice.key"), Out: filepath.Join(dir, "proxy.pem"),
		Lifetime: time.Hour, Restrict: []string{"echo"}})
	if err != nil || p.Out != filepath.Join(dir, "proxy.pem") || !strings.Contains(p.Subject, "OU=user") {
		t.Fatalf("InitProxy: %+v, %v", p, err)
	}
	var re *RestrictionError
	if _, err := InitProxy(ProxyRequest{Restrict: []string{"myweb"}}); !errors.As(err, &re) || re.Entry != "myweb" {
		t.Errorf("a restriction to an unknown service: %v; want a RestrictionError naming it", err)
	}

	creds := func(cert string) Credentials {
		return Credentials{CA: f.Cert, CRL: f.CRL, Cert: filepath.Join(dir, cert)}
	}
	control := fmt.Sprintf("@gridlink-api-test-%d", os.Getpid())
	h := serveHub(t, HubConfig{KeyFile: filepath.Join(dir, "site.key"), Credentials: creds("hub.pem"), Control: control, FallbackName: "nope"})
	if h.Name() != "site" {
		t.Errorf("hub name %q; want the certified site", h.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := StartAttached(ctx, Config{KeyFile: filepath.Join(dir, "n1.key"), Credentials: creds("n1.pem"), Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1", FallbackName: "nope"})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if n.Name() != "n1" || n.Machine().HubName != "site" {
		t.Errorf("node %q at hub %q; want n1 at site", n.Name(), n.Machine().HubName)
	}
	u, err := StartAttached(ctx, Config{Name: "alice-n", Credentials: Credentials{CA: f.Cert, Proxy: filepath.Join(dir, "proxy.pem")}, Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	st, err := QueryHub(ctx, control)
	if err != nil || st.Name != "site" || st.ID != h.ID() {
		t.Fatalf("QueryHub: %+v, %v", st, err)
	}
	var names []string
	for _, m := range st.Nodes {
		names = append(names, m.Name)
	}
	if got := strings.Join(names, " "); !strings.Contains(" "+got+" ", " n1 ") || !strings.Contains(" "+got+" ", " alice-n ") {
		t.Errorf("hub status nodes %q; want n1 and alice-n", got)
	}
	var nh *NoHubError
	if _, err := QueryHub(ctx, control+"-none"); !errors.As(err, &nh) {
		t.Errorf("QueryHub without a hub: %v; want a NoHubError", err)
	}

	r, err := RevokeCA(gca, nil, []string{filepath.Join(dir, "n1.pem")}, nil)
	if err != nil || r.Revoked != 1 || r.CRL != f.CRL {
		t.Errorf("RevokeCA: %+v, %v; want one revoked in %s", r, err, f.CRL)
	}
	if _, _, err := creds("n1.pem").Load(Key{}); err == nil {
		t.Error("a revoked certificate loads")
	}
}

// perf through the API: a server on one node, a client on another,
// through a hub; and the agent's node as the agent starts it.
func TestPerfAndAgent(t *testing.T) {
	h := serveHub(t, HubConfig{Name: "site"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1"}
	cfg.Name = "srv"
	srv, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	l, err := srv.ListenWith("0", ListenOptions{AllowPlain: true})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	go ServePerf(sctx, l, nil)
	cfg.Name = "cli"
	c, err := StartAttached(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	port := l.Addr().String()[strings.LastIndexByte(l.Addr().String(), ':')+1:]
	res, err := c.Perf(ctx, "srv", atoi(t, port), PerfOptions{Duration: 300 * time.Millisecond, Interval: 100 * time.Millisecond, Link: LinkOptions{Plain: true}})
	if err != nil || res.Bytes == 0 || res.Encrypt {
		t.Fatalf("Perf: %+v, %v; want bytes over a plain link", res, err)
	}

	sock := fmt.Sprintf("@gridlink-api-agent-%d", os.Getpid())
	cfg.Name = "ag"
	a, err := StartAgent(ctx, AgentConfig{Node: cfg, Control: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	st, err := control.Dial(sock).Status(ctx)
	if err != nil || st.Node.Name != "ag" || a.Node().Name() != "ag" || a.Control() != sock {
		t.Errorf("agent status: %+v, %v", st.Node, err)
	}
	// The agent's node serves transfers as any node does (it once had no
	// credentials, and ServeTransfers panicked on it).
	svc, err := ServeTransfers(a.Node(), cfg, ServeConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatalf("ServeTransfers on the agent's node: %v", err)
	}
	svc.Close()
}

func atoi(t *testing.T, s string) int {
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAddrWithPort(t *testing.T) {
	for in, want := range map[string]string{"b": "b:5201", "b:7": "b:7", "b@site": "b:5201@site", "b:echo@site": "b:echo@site"} {
		if got := AddrWithPort(in, 5201); got != want {
			t.Errorf("AddrWithPort(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestLoadSOCKSUsers(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	os.WriteFile(good, []byte("# users\nalice:secret\n\nbob:x:y\n"), 0o600)
	os.WriteFile(bad, []byte("alice:secret\nnocolon\n"), 0o600)
	u, err := LoadSOCKSUsers(good)
	if err != nil || len(u) != 2 || u["alice"] != "secret" || u["bob"] != "x:y" {
		t.Errorf("LoadSOCKSUsers: %v, %v", u, err)
	}
	if _, err := LoadSOCKSUsers(bad); err == nil || !strings.Contains(err.Error(), bad+":2:") {
		t.Errorf("a line without a colon: %v; want its line named", err)
	}
}
