package exec

import (
	"bytes"
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent"
	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
	"github.com/gridlink/gridlink/vconn"
)

// logBuf collects log lines.
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

func (b *logBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}

// grid is a test overlay: a hub, a target agent serving exec with a
// grid-mapfile, and callers' agents, all on loopback; as the command line
// runs them, callers reach the exec service through their own agent.
type grid struct {
	g       *pkitest.Grid // nil: an open grid
	hub     string
	target  *agent.Agent
	svc     *Service
	log     *logBuf // the target's log: its node's and the exec service's
	mapfile string
}

var sockSeq atomic.Int64

// newGrid starts a hub and the target "target" with a grid-mapfile of
// mapText; open: without a grid CA.
func newGrid(t testing.TB, mapText string, open bool) *grid {
	t.Helper()
	return newGridWith(t, mapText, open, Config{})
}

// newGridWith is newGrid with the exec service's configuration cfg (its
// grid-mapfile and log set here).
func newGridWith(t testing.TB, mapText string, open bool, cfg Config) *grid {
	t.Helper()
	gr := &grid{log: &logBuf{}}
	var hubCreds, targetCreds *pki.Credentials
	if open {
		key, err := identity.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		hubCreds, _ = pki.NewCredentials(key)
	} else {
		gr.g = pkitest.New(t, "testgrid")
		hubCreds, targetCreds = gr.g.Member(t, ca.Hub, "site"), gr.g.Member(t, ca.Node, "target")
	}
	h, err := hubserver.New(hubserver.Config{Name: "site", Creds: hubCreds, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	hctx, hcancel := context.WithCancel(context.Background())
	hdone := make(chan struct{})
	go func() { _ = h.Serve(hctx); close(hdone) }()
	t.Cleanup(func() { hcancel(); <-hdone })
	gr.hub = h.Addr().String()
	gr.mapfile = filepath.Join(t.TempDir(), "grid-mapfile")
	if err := os.WriteFile(gr.mapfile, []byte(mapText), 0o644); err != nil {
		t.Fatal(err)
	}
	gr.target = gr.agent(t, "target", targetCreds, gr.log.logf)
	cfg.Mapfile, cfg.Logf = gr.mapfile, gr.log.logf
	if gr.svc, err = Listen(gr.target.Node(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gr.svc.Close() })
	return gr
}

// agent starts an agent on the grid's hub.
func (gr *grid) agent(t testing.TB, name string, creds *pki.Credentials, logf func(string, ...any)) *agent.Agent {
	t.Helper()
	sock := fmt.Sprintf("@gridlink-exec-test-%d-%d-%s", os.Getpid(), sockSeq.Add(1), name)
	a, err := agent.Start(context.Background(), agent.Config{Control: sock, Node: vconn.Config{Name: name, Creds: creds, Hubs: []string{gr.hub}, ListenAddr: "127.0.0.1", Logf: logf}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// caller starts a caller's agent with creds and returns its client.
func (gr *grid) caller(t testing.TB, name string, creds *pki.Credentials) *control.Client {
	t.Helper()
	return control.Dial(gr.agent(t, name, creds, nil).Control())
}

// user is a caller's agent holding a proxy of user name (unrestricted).
func (gr *grid) user(t testing.TB, name string) *control.Client {
	t.Helper()
	return gr.caller(t, name+"-node", gr.g.Proxy(t, gr.g.User(t, name), proxy.Options{}))
}

// execAt runs req at the target through the caller's agent, as gridlink
// exec does.
func execAt(ctx context.Context, c *control.Client, req Request, stdio IO) (Status, error) {
	return RunThrough(ctx, c, "target", control.LinkOptions{}, req, stdio)
}

// output runs a command and returns its stdout, stderr and status.
func output(t *testing.T, c *control.Client, req Request, stdin []byte) (string, string, Status, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	io := IO{Stdout: &out, Stderr: &errb}
	if stdin != nil {
		io.Stdin = bytes.NewReader(stdin)
	}
	st, err := execAt(ctx, c, req, io)
	return out.String(), errb.String(), st, err
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root")
		}
		t.Skip("needs root (switches to other accounts)")
	}
}

// testAccount makes a local account for the test (useradd; removed when
// the test ends) with shell /bin/sh and a home of its own, and returns
// its name, uid and home.
func testAccount(t *testing.T) (name string, uid int, home string) {
	t.Helper()
	needRoot(t)
	name = fmt.Sprintf("glexec%d", os.Getpid()%1000000)
	home, err := os.MkdirTemp("", "glexec-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	if out, err := osexec.Command("useradd", "-M", "-U", "-d", home, "-s", "/bin/sh", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := osexec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
	})
	a, err := lookupAccount(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, int(a.uid), int(a.gid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o755); err != nil {
		t.Fatal(err)
	}
	return name, int(a.uid), home
}
