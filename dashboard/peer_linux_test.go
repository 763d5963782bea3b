package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gridlink/gridlink/peercred/peercredtest"
)

// nobody is the uid the tests play another user with.
const nobody = peercredtest.Nobody

// dialAs connects to addr from a socket that uid owns (needs root).
func dialAs(t *testing.T, uid int, addr string) net.Conn {
	return peercredtest.DialAs(t, uid, "tcp", addr)
}

// A connection from another user is refused even with the right token:
// the kernel's socket table says whose it is.
func TestOtherUserRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("playing another user needs root")
	}
	s, log := newBare(t)
	ctx, cancel := context.WithCancel(testCtx)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	get := func(c net.Conn) (int, string) {
		req, _ := http.NewRequest("GET", s.URL(), nil)
		if err := req.Write(c); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	c := dialAs(t, nobody, s.Addr().String())
	code, body := get(c)
	c.Close()
	if code != http.StatusForbidden || !strings.Contains(body, RefusedOtherUser) || !strings.Contains(body, fmt.Sprintf("uid %d", nobody)) {
		t.Errorf("another user with the token: %d %q; want 403 naming the user", code, body)
	}
	if !strings.Contains(log.String(), RefusedOtherUser) {
		t.Errorf("the log does not name the refusal:\n%s", log)
	}
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if code, body := get(c); code != http.StatusSeeOther {
		t.Errorf("this user with the token: %d %q; want the sign-on's 303", code, body)
	}
}

// Another user's dashboard cannot drive this user's agent: it runs as
// that user, and the agent answers its own uid (and root) only. The test
// runs `gridlink dashboard` as nobody against an agent of this uid and
// reads its state as nobody: the agent's refusal in place of its status.
func TestOtherUsersDashboardRefusedByAgent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("playing another user needs root")
	}
	g := newGrid(t)
	bin := gridlinkBin(t)
	cmd := exec.Command(bin, "dashboard", "--no-browser", "--control", g.control, "--hub-status", g.hubSock, "--hub", g.hub.Addr().String())
	cmd.SysProcAttr = nobodyAttr()
	cmd.Env = append(os.Environ(), "HOME=/nonexistent", "XDG_RUNTIME_DIR=")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("gridlink dashboard as nobody: %v\n%s", err, stderr.String())
	}
	u := strings.TrimSpace(strings.TrimPrefix(line, "gridlink dashboard: "))
	host := strings.TrimPrefix(strings.SplitN(u, "/?", 2)[0], "http://")
	tok := strings.SplitN(u, "token=", 2)[1]
	c := dialAs(t, nobody, host)
	defer c.Close()
	req, _ := http.NewRequest("GET", "http://"+host+"/api/state", nil)
	req.Header.Set(TokenHeader, tok)
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st State
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("state: %s: %v", resp.Status, err)
	}
	want := fmt.Sprintf("refuses uid %d", nobody)
	if st.Agent != nil || !strings.Contains(st.AgentError, want) {
		t.Errorf("nobody's dashboard read the agent: %+v, error %q; want the agent's refusal %q", st.Agent, st.AgentError, want)
	}
	// the hub's status socket refuses nobody too
	if len(st.Overlay.Errors) != 1 || !strings.Contains(st.Overlay.Errors[0], want) {
		t.Errorf("nobody's dashboard read the hub: %+v", st.Overlay)
	}
}

// nobodyAttr runs a command as nobody.
func nobodyAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
}

// gridlinkBin is a gridlink binary another user may run: $GRIDLINK_BIN,
// else one built for the test, in a directory others may enter.
func gridlinkBin(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gridlink-dash-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "gridlink")
	if src := os.Getenv("GRIDLINK_BIN"); src != "" {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
		return bin
	}
	build := exec.Command("go", "build", "-o", bin, "github.com/gridlink/gridlink/cmd/gridlink")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
