package gridlink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
	"github.com/gridlink/gridlink/status"
)

// A node with a two-minute proxy: its log warns when a tenth of the
// lifetime remains, says once at its end that it expired and what to do,
// its status says "expired"; a renewed proxy for the same key written
// over it is taken within the reread interval (status valid again, the
// new end), one for another key is refused in the log and the old one
// kept. On synthetic time.
func TestCredWatchTwoMinuteProxy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		g := pkitest.New(t, "testgrid")
		g.WriteGrid(t, dir)
		user := g.User(t, "alice")
		p, err := proxy.New(user, proxy.Options{Lifetime: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		files := Credentials{CA: filepath.Join(dir, "ca.pem"), CRL: filepath.Join(dir, "crl.pem"), Proxy: pkitest.WriteProxy(t, dir, "alice", p).Proxy}
		creds, _, err := files.Load(Key{})
		if err != nil {
			t.Fatal(err)
		}
		var log testwait.Log
		w := newCredWatch(files, creds, slog.New(slog.NewTextHandler(&log, nil)))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go w.run(ctx)
		own := func() status.Credential {
			for _, c := range w.status() {
				if c.Kind == status.CredProxy {
					return c
				}
			}
			t.Fatalf("no proxy in the status: %+v", w.status())
			return status.Credential{}
		}
		end := p.Leaf().NotAfter
		if c := own(); c.State != status.CredValid || !c.NotAfter.Equal(end) || c.File != files.Proxy {
			t.Fatalf("a new proxy: %+v", c)
		}
		time.Sleep(time.Until(end) - 13*time.Second)
		synctest.Wait()
		if s := log.String(); strings.Contains(s, "level=WARN") {
			t.Errorf("logged 13 s before the end: %s", s)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		warn := log.Line(t, "level=WARN", "the proxy", files.Proxy, "expires in 12s", "renew it with `gridlink proxy init`")
		if c := own(); c.State != status.CredExpiring {
			t.Errorf("11 s before the end: %s (%s)", c.State, warn)
		}
		time.Sleep(time.Until(end))
		synctest.Wait()
		line := log.Line(t, "level=WARN", "the proxy", "expired at "+end.UTC().Format(time.RFC3339), "renew it with `gridlink proxy init`; until then peers refuse this node")
		if c := own(); c.State != status.CredExpired {
			t.Errorf("at its end: %s (%s)", c.State, line)
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if n := strings.Count(log.String(), "expired at"); n != 1 {
			t.Errorf("the expiry logged %d times:\n%s", n, log.String())
		}

		// proxy init: the same key, a new proxy
		id := creds.Key.ID()
		renewed, err := renewProxy(files.Proxy, user, proxy.Options{Lifetime: time.Hour})
		if err != nil || renewed == nil {
			t.Fatalf("renewProxy: %v, %v", renewed, err)
		}
		if err := proxy.Save(files.Proxy, renewed); err != nil {
			t.Fatal(err)
		}
		time.Sleep(credCheckInterval)
		synctest.Wait()
		log.Line(t, "the proxy", "was renewed: valid until "+renewed.Leaf().NotAfter.UTC().Format(time.RFC3339))
		if c := own(); c.State != status.CredValid || !c.NotAfter.Equal(renewed.Leaf().NotAfter) || creds.Key.ID() != id {
			t.Errorf("renewed: %+v (ID %s, was %s)", c, creds.Key.ID().Short(), id.Short())
		}

		// another key: refused, the proxy in use kept
		other, err := proxy.New(user, proxy.Options{Lifetime: 2 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := proxy.Save(files.Proxy, other); err != nil {
			t.Fatal(err)
		}
		time.Sleep(credCheckInterval)
		synctest.Wait()
		log.Line(t, "the proxy", "was not reloaded (the one in use stays)", pki.ErrNewKey.Error())
		if c := own(); !c.NotAfter.Equal(renewed.Leaf().NotAfter) || !strings.Contains(c.Error, pki.ErrNewKey.Error()) {
			t.Errorf("after a proxy for another key: %+v", c)
		}
	})
}

// The marks a credential's log warnings fall on, by kind and lifetime.
func TestCredMarks(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		kind string
		life time.Duration
		want string
	}{
		{status.CredProxy, 12 * time.Hour, "[1h0m0s 10m0s 1m0s 0s]"},
		{status.CredProxy, 2 * time.Minute, "[12s 0s]"},
		{status.CredProxy, 30 * time.Minute, "[3m0s 1m0s 0s]"},
		{status.CredCertificate, 365 * 24 * time.Hour, "[24h0m0s 1h0m0s 0s]"},
		{status.CredCRL, 7 * 24 * time.Hour, "[16h48m0s 1h0m0s 0s]"},
	} {
		c := status.Credential{Kind: tc.kind, NotBefore: t0, NotAfter: t0.Add(tc.life)}
		if got := fmt.Sprint(marks(c)); got != tc.want {
			t.Errorf("a %s of %v: marks %s, want %s", tc.kind, tc.life, got, tc.want)
		}
	}
}

// `gridlink proxy init` renews into a running agent: an agent whose
// proxy (of a few seconds) expired says so in its status and log, and
// peers refuse it, naming the expiry; an nc-like stream set up before
// carries on; a proxy for the same key written over the file is taken,
// the status shows the new end and the same identity, peers admit the
// node again (its listeners and its dials present the new proxy), and
// the stream still carries on.
func TestAgentProxyRenewedUnderStream(t *testing.T) {
	old := credCheckInterval
	credCheckInterval = 50 * time.Millisecond
	t.Cleanup(func() { credCheckInterval = old })

	dir := t.TempDir()
	gca := filepath.Join(dir, "ca")
	f, err := InitCA(CAConfig{Dir: gca, Name: "testgrid"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ role, name string }{{"hub", "site"}, {"node", "srv"}, {"user", "alice"}} {
		if _, err := IssueCert(CertRequest{Dir: gca, Role: c.role, Name: c.name, KeyFile: filepath.Join(dir, c.name+".key"), Out: filepath.Join(dir, c.name+".pem"), Lifetime: 24 * time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	initProxy := func(life time.Duration) Proxy {
		t.Helper()
		p, err := InitProxy(ProxyRequest{CertFile: filepath.Join(dir, "alice.pem"), KeyFile: filepath.Join(dir, "alice.key"), Out: filepath.Join(dir, "proxy.pem"), Lifetime: life})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := initProxy(5 * time.Second)
	certOf := func(name string) Credentials {
		return Credentials{CA: f.Cert, CRL: f.CRL, Cert: filepath.Join(dir, name+".pem")}
	}
	h := serveHub(t, HubConfig{KeyFile: filepath.Join(dir, "site.key"), Credentials: certOf("site")})
	var srvLog testwait.Log
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := StartAttached(ctx, Config{KeyFile: filepath.Join(dir, "srv.key"), Credentials: certOf("srv"), Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1", Logger: slog.New(slog.NewTextHandler(&srvLog, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	l, err := srv.Listen("0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go echoAll(l)
	var log testwait.Log
	sock := fmt.Sprintf("@gridlink-credwatch-test-%d", os.Getpid())
	cfg := Config{Name: "alice-n", Credentials: Credentials{CA: f.Cert, CRL: f.CRL, Proxy: first.Out}, Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1", Logger: slog.New(slog.NewTextHandler(&log, nil))}
	a, err := StartAgent(ctx, AgentConfig{Node: cfg, Control: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cl := control.Dial(sock)
	proxyOf := func() (status.Credential, *status.Agent) {
		t.Helper()
		st, err := cl.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range st.Credentials {
			if c.Kind == status.CredProxy {
				return c, st
			}
		}
		t.Fatalf("no proxy in the agent's status: %+v", st.Credentials)
		return status.Credential{}, nil
	}
	before, st := proxyOf()
	if before.State == status.CredExpired || !before.NotAfter.Equal(first.NotAfter) {
		t.Fatalf("the agent's proxy: %+v; want valid until %v", before, first.NotAfter)
	}
	id := st.Node.ID

	port := l.Addr().String()[strings.LastIndexByte(l.Addr().String(), ':')+1:]
	stream, err := cl.Connect(ctx, control.ConnectRequest{Addr: "srv:" + port})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	echo := func(msg string) {
		t.Helper()
		if _, err := io.WriteString(stream, msg); err != nil {
			t.Fatalf("writing %q: %v", msg, err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(stream, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo of %q: %q, %v", msg, buf, err)
		}
	}
	echo("before the proxy expired\n")

	testwait.Until(t, "the agent's status saying its proxy expired", 0, func() bool {
		c, _ := proxyOf()
		return c.State == status.CredExpired
	})
	log.Line(t, "level=WARN", "the proxy", first.Out, "expired at", "renew it with `gridlink proxy init`; until then peers refuse this node")
	echo("after the proxy expired\n")
	dctx, dcancel := context.WithTimeout(ctx, 3*time.Second)
	defer dcancel()
	if c, err := srv.Dial(dctx, "alice-n:echo"); err == nil {
		c.Close()
		t.Error("a peer reached the node of an expired proxy")
	}
	// the refusing peer names the expiry (the node's own words are its
	// log's line above); the dial itself runs to its deadline, vconn
	// trying other methods
	srvLog.Line(t, "not admitted: proxy 1: expired at")

	second := initProxy(time.Hour)
	testwait.Until(t, "the agent's status showing the renewed proxy", 0, func() bool {
		c, _ := proxyOf()
		return c.NotAfter.Equal(second.NotAfter) && c.State == status.CredValid
	})
	log.Line(t, "the proxy", "was renewed")
	if _, st := proxyOf(); st.Node.ID != id {
		t.Errorf("the agent's node is %s after the renewal, was %s", st.Node.ID.Short(), id.Short())
	}
	echo("after the renewal\n")

	// peers admit it again, dialling it (its listeners present the new
	// proxy) and dialled by it (a new stream's handshake)
	back, err := srv.Dial(ctx, "alice-n:echo")
	if err != nil {
		t.Fatalf("a peer dialling the node after the renewal: %v", err)
	}
	defer back.Close()
	if _, err := io.WriteString(back, "y"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(back, make([]byte, 1)); err != nil {
		t.Errorf("no echo from the renewed node: %v", err)
	}
	again, err := cl.Connect(ctx, control.ConnectRequest{Addr: "srv:" + port})
	if err != nil {
		t.Fatalf("a stream after the renewal: %v", err)
	}
	defer again.Close()
	if _, err := io.WriteString(again, "x"); err != nil {
		t.Fatal(err)
	}
	if b := make([]byte, 1); func() error { _, err := io.ReadFull(again, b); return err }() != nil {
		t.Error("no echo on a stream set up after the renewal")
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("out of time")
	}
}

// echoAll echoes every connection l accepts until it closes.
func echoAll(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
	}
}

// proxy init over a proxy of the same user certificate keeps its key
// (the agent's identity); --new-key, or another user's proxy there, does
// not.
func TestInitProxyKeepsKey(t *testing.T) {
	dir := t.TempDir()
	gca := filepath.Join(dir, "ca")
	if _, err := InitCA(CAConfig{Dir: gca, Name: "testgrid"}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"alice", "bob"} {
		if _, err := IssueCert(CertRequest{Dir: gca, Role: "user", Name: u, KeyFile: filepath.Join(dir, u+".key"), Out: filepath.Join(dir, u+".pem"), Lifetime: 24 * time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "proxy.pem")
	keyOf := func(user string, newKey bool) string {
		t.Helper()
		if _, err := InitProxy(ProxyRequest{CertFile: filepath.Join(dir, user+".pem"), KeyFile: filepath.Join(dir, user+".key"), Out: out, Lifetime: time.Hour, NewKey: newKey}); err != nil {
			t.Fatal(err)
		}
		p, err := proxy.Load(out)
		if err != nil {
			t.Fatal(err)
		}
		return pkitest.ProxyKey(t, p).ID().String()
	}
	first := keyOf("alice", false)
	if again := keyOf("alice", false); again != first {
		t.Errorf("a renewed proxy has key %s, was %s", again, first)
	}
	fresh := keyOf("alice", true)
	if fresh == first {
		t.Error("--new-key kept the key")
	}
	if bob := keyOf("bob", false); bob == fresh {
		t.Error("another user's proxy took alice's proxy key")
	}
}
