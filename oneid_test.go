package gridlink

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 33 as reported: on a grid with a CA, alice's agent runs with her
// proxy; a one-shot task (cp) with the same proxy starts a node of its
// own with the same identity. It is refused at once in one line (who
// holds the identity, where, since when; use it or stop it), and the
// agent's node keeps its hub; they no longer evict each other.
func TestSecondProcessWithProxyRefused(t *testing.T) {
	dir := t.TempDir()
	gca := filepath.Join(dir, "ca")
	f, err := InitCA(CAConfig{Dir: gca, Name: "testgrid"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ role, name string }{{"hub", "site"}, {"user", "alice"}} {
		if _, err := IssueCert(CertRequest{Dir: gca, Role: c.role, Name: c.name, KeyFile: filepath.Join(dir, c.name+".key"), Out: filepath.Join(dir, c.name+".pem"), Lifetime: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := InitProxy(ProxyRequest{CertFile: filepath.Join(dir, "alice.pem"), KeyFile: filepath.Join(dir, "alice.key"), Out: filepath.Join(dir, "proxy.pem"), Lifetime: time.Hour}); err != nil {
		t.Fatal(err)
	}
	h := serveHub(t, HubConfig{KeyFile: filepath.Join(dir, "site.key"), Credentials: Credentials{CA: f.Cert, CRL: f.CRL, Cert: filepath.Join(dir, "site.pem")}})
	proxy := Config{Credentials: Credentials{CA: f.Cert, Proxy: filepath.Join(dir, "proxy.pem")}, Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	agent, err := StartAttached(ctx, proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()

	start := time.Now()
	cp, err := StartAttached(ctx, proxy)
	if err == nil {
		cp.Close()
		t.Fatal("a second node with alice's proxy attached while her agent's was")
	}
	if !errors.Is(err, ErrIdentityAttached) {
		t.Errorf("the second node: %v; want ErrIdentityAttached", err)
	}
	for _, want := range []string{"another process with this identity", "already runs at 127.0.0.1:", "attached to hub site since", "use it", "stop it", "gridlink proxy init"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("the refusal is more than one line: %q", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refusal took %v", d)
	}
	if err := agent.Attached(); err != nil {
		t.Errorf("the agent's node lost its hub: %v", err)
	}
	t.Logf("refused: %v", err)
}
