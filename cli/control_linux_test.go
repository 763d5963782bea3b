package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/agent"
	"github.com/gridlink/gridlink/vconn"
)

const cliHelperEnv = "GRIDLINK_CLI_TEST_ARGS"

// TestCLIHelper runs the command line with the arguments in
// GRIDLINK_CLI_TEST_ARGS (one per line) in a helper process; it does
// nothing in a plain test run.
func TestCLIHelper(t *testing.T) {
	if args := os.Getenv(cliHelperEnv); args != "" {
		root := Root()
		root.SetArgs(strings.Split(args, "\n"))
		if err := root.Execute(); err != nil {
			fmt.Fprintln(os.Stderr, "gridlink:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.b, format+"\n", args...)
}

func (l *lockedLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(b)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// gridlink status (of the agent, and --hub of the hub) run by uid 65534
// against an agent and a hub of root's: the CLI prints "agent of uid 0
// refuses uid 65534" (and "hub of ...") and exits 1, and both servers log
// the same; root's own status works.
func TestStatusRefusesOtherUIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (runs the CLI as another uid)")
	}
	hubLog, agentLog := &lockedLog{}, &lockedLog{}
	hubControl := fmt.Sprintf("@gridlink-test-%d-hub", os.Getpid())
	h, err := gridlink.NewHub(gridlink.HubConfig{Name: "site", Listen: "127.0.0.1:0", Control: hubControl, Logger: slog.New(slog.NewTextHandler(hubLog, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go h.Serve(ctx)
	control := fmt.Sprintf("@gridlink-test-%d-agent", os.Getpid())
	a, err := agent.Start(ctx, agent.Config{Control: control, Node: vconn.Config{Name: "alice", Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1", Logf: agentLog.logf}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	// a copy of this test binary that uid 65534 may run.
	self, _ := os.Executable()
	dir, err := os.MkdirTemp("", "gridlink-cli-helper-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "cli.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(uid int, args ...string) (string, error) {
		cmd := exec.Command(bin, "-test.run=^TestCLIHelper$")
		cmd.Env = append(os.Environ(), cliHelperEnv+"="+strings.Join(args, "\n"), "HOME=/")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, c := range []struct {
		args []string
		want string
		log  *lockedLog
	}{
		{[]string{"status", "--control", control}, "gridlink: agent of uid 0 refuses uid 65534", agentLog},
		{[]string{"status", "--hub", "--control", hubControl}, "gridlink: hub of uid 0 refuses uid 65534", hubLog},
	} {
		out, err := run(65534, c.args...)
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || strings.TrimSpace(out) != c.want {
			t.Errorf("%v as uid 65534: %v, %q; want exit 1 and %q", c.args, err, out, c.want)
		}
		if why := strings.TrimPrefix(c.want, "gridlink: "); !strings.Contains(c.log.String(), why) {
			t.Errorf("%v as uid 65534: the server's log lacks %q:\n%s", c.args, why, c.log)
		}
		out, err = run(0, c.args...)
		if err != nil || !strings.Contains(out, "alice") && !strings.Contains(out, "hub site") {
			t.Errorf("%v as root: %v\n%s", c.args, err, out)
		}
	}
}
