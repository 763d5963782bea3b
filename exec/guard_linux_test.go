package exec

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/pki/proxy"
)

const helperEnv = "GRIDLINK_EXEC_TEST_HELPER"

// TestExecHelper is the body of a helper process run as another uid; it
// does nothing in a plain test run.
func TestExecHelper(t *testing.T) {
	if os.Getenv(helperEnv) != "client" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := RunThrough(ctx, control.Dial(os.Getenv("CONTROL")), "target", control.LinkOptions{}, Request{Command: []string{"touch " + os.Getenv("MARK")}}, IO{})
	fmt.Printf("RESULT %v\n", err)
}

// Another local account on the caller's host drives alice's agent (which
// holds her proxy) to run commands as alice elsewhere: the agent's
// control guard refuses it, on both ends, and nothing runs.
func TestExecOtherUIDAtAgent(t *testing.T) {
	needRoot(t)
	gr := newGrid(t, aliceMap, false)
	agentLog := &logBuf{}
	a := gr.agent(t, "alice-node", gr.g.Proxy(t, gr.g.User(t, "alice"), proxy.Options{}), agentLog.logf)
	mark := filepath.Join(t.TempDir(), "ran")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "gridlink-exec-helper-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b, err := os.ReadFile(self)
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	bin := filepath.Join(dir, "exec.test")
	if err == nil {
		err = os.WriteFile(bin, b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := osexec.Command(bin, "-test.run=^TestExecHelper$")
	cmd.Env = []string{helperEnv + "=client", "CONTROL=" + a.Control(), "MARK=" + mark, "HOME=/", "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	why := "agent of uid 0 refuses uid 65534"
	if !strings.Contains(string(out), "RESULT ") || !strings.Contains(string(out), why) {
		t.Errorf("uid 65534 at alice's agent: %s; want %q", out, why)
	}
	if !agentLog.has(why) {
		t.Errorf("alice's agent's log does not say %q:\n%s", why, agentLog)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("the command ran")
	}
}
