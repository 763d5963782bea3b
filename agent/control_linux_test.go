package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/vconn"
)

// The control API's callers are told apart by uid: these tests run
// clients (and an agent) as other uids, in helper processes of this test
// binary started with syscall.Credential; they need root.

const helperEnv = "GRIDLINK_AGENT_TEST_HELPER"

const nobody = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root")
		}
		t.Skip("needs root (runs clients as other uids)")
	}
}

// helperBin is the test's copy of this test binary (helperBinary).
var helperBin string

// helperBinary copies this test binary where any uid may run it (go
// test's own build directory is private to root), for asUID.
func helperBinary(t *testing.T) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "gridlink-agent-helper-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b, err := os.ReadFile(self)
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil {
		helperBin = filepath.Join(dir, "agent.test")
		err = os.WriteFile(helperBin, b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// asUID is a helper process of mode (see TestControlHelper) run as uid
// (and gid) with the extra environment env.
func asUID(uid int, mode string, env ...string) *exec.Cmd {
	cmd := exec.Command(helperBin, "-test.run=^TestControlHelper$")
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "XDG_RUNTIME_DIR=") && !strings.HasPrefix(e, "GOCOVERDIR=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, append([]string{helperEnv + "=" + mode, "HOME=/"}, env...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	return cmd
}

// runClient runs the client helper as uid and returns its result lines
// (OP ok ... / OP refused ... / OP error ...).
func runClient(t *testing.T, uid int, sock string, ops string, env ...string) map[string]string {
	t.Helper()
	cmd := asUID(uid, "client", append([]string{"CONTROL=" + sock, "OPS=" + ops}, env...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client helper as uid %d: %v\n%s", uid, err, out)
	}
	res := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "RESULT "); ok {
			op, what, _ := strings.Cut(rest, " ")
			res[op] = what
		}
	}
	return res
}

// TestControlHelper is the helper processes' body; it does nothing in a
// plain test run.
func TestControlHelper(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "client":
		helperClient()
	case "agent":
		helperAgent()
	}
}

func helperClient() {
	c := control.Dial(os.Getenv("CONTROL"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	report := func(op string, err error, ok string) {
		var cr *control.CallerRefusedError
		switch {
		case errors.As(err, &cr):
			fmt.Printf("RESULT %s refused %v\n", op, err)
		case err != nil:
			fmt.Printf("RESULT %s error %v\n", op, err)
		default:
			fmt.Printf("RESULT %s ok %s\n", op, ok)
		}
	}
	for _, op := range strings.Split(os.Getenv("OPS"), ",") {
		switch op {
		case "status":
			st, err := c.Status(ctx)
			name := ""
			if err == nil {
				name = st.Node.Name
			}
			report(op, err, name)
		case "ping":
			res, err := c.Ping(ctx, control.PingRequest{Addr: os.Getenv("TARGET"), Dials: 1, Count: 1})
			if err == nil && res.Error != "" {
				err = errors.New(res.Error)
			}
			report(op, err, "")
		case "connect":
			conn, err := c.Connect(ctx, control.ConnectRequest{Addr: os.Getenv("TARGET")})
			if err == nil {
				conn.Close()
			}
			report(op, err, "")
		case "open":
			s, err := c.Open(ctx, control.ConnectRequest{Addr: os.Getenv("TARGET")})
			if err == nil {
				s.Close()
			}
			report(op, err, "")
		case "end": // why stream STREAM ended
			err := c.StreamEnd(ctx, os.Getenv("STREAM"))
			report(op, err, "")
		case "expose":
			l, err := c.Expose(ctx, control.ExposeRequest{Local: "127.0.0.1:1", Name: "alice-svc"})
			if err == nil {
				l.Close()
			}
			report(op, err, "")
		}
	}
}

// helperAgent runs an agent (at CONTROL, by default its own default
// control socket) until its standard input closes.
func helperAgent() {
	a, err := Start(context.Background(), Config{Control: os.Getenv("CONTROL"), Node: vconn.Config{Name: os.Getenv("NAME"), Hubs: []string{os.Getenv("HUB")}, ListenAddr: "127.0.0.1"}})
	if err != nil {
		fmt.Println("ERROR", err)
		return
	}
	fmt.Println("CONTROL", a.Control())
	_, _ = io.Copy(io.Discard, os.Stdin)
	a.Close()
}

// startLoggedAgent is startAgent with the agent's log kept.
func startLoggedAgent(t *testing.T, name, hubAddr string) (*Agent, string, *testwait.Log) {
	t.Helper()
	log := &testwait.Log{}
	sock := fmt.Sprintf("@gridlink-test-%d-%s", os.Getpid(), name)
	a, err := Start(context.Background(), Config{Control: sock, Node: vconn.Config{Name: name, Hubs: []string{hubAddr}, ListenAddr: "127.0.0.1", Logf: log.Logf}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, sock, log
}

// Another uid than the agent's (root's here) uses its control API: every
// request is refused with "agent of uid 0 refuses uid 65534" on the
// client's side and in the agent's log, and nothing is done in its name
// (no service is published); root is served.
func TestControlRefusesOtherUIDs(t *testing.T) {
	needRoot(t)
	helperBinary(t)
	hubAddr := startHub(t)
	_, controlA, logA := startLoggedAgent(t, "alpha", hubAddr)
	_, cb := startAgent(t, "beta", hubAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ex, err := cb.Expose(ctx, control.ExposeRequest{Local: hashServer(t), Name: "hash"})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()

	ops := "status,ping,connect,open,expose"
	res := runClient(t, nobody, controlA, ops, "TARGET=beta:hash")
	want := fmt.Sprintf("agent of uid 0 refuses uid %d", nobody)
	for _, op := range strings.Split(ops, ",") {
		if res[op] != "refused "+want {
			t.Errorf("%s as uid %d: %q, want refused %q", op, nobody, res[op], want)
		}
	}
	if n := strings.Count(logA.String(), want); n != 5 {
		t.Errorf("the agent logged %q %d times, want 5:\n%s", want, n, logA)
	}
	// the refused expose published nothing under alpha.
	if c, err := cb.Connect(ctx, control.ConnectRequest{Addr: "alpha:alice-svc"}); err == nil {
		c.Close()
		t.Error("alpha:alice-svc was published by a refused caller")
	}

	// root is served: status, and a stream through the agent.
	ca := control.Dial(controlA)
	if st, err := ca.Status(ctx); err != nil || st.Node.Name != "alpha" {
		t.Fatalf("root's status: %+v, %v", st, err)
	}
	conn, err := ca.Connect(ctx, control.ConnectRequest{Addr: "beta:hash"})
	if err != nil {
		t.Fatalf("root's connect: %v", err)
	}
	conn.Write([]byte("x"))
	conn.(interface{ CloseWrite() error }).CloseWrite()
	sum, _ := io.ReadAll(conn)
	conn.Close()
	if len(sum) != 32 {
		t.Errorf("root's stream: %d bytes back, want 32", len(sum))
	}
}

// A non-root user's agent listens on the user's own socket
// ($XDG_RUNTIME_DIR/gridlink/agent.sock, in a 0700 directory of hers);
// her clients find it without being told where, and root is served too.
func TestUserAgentSocket(t *testing.T) {
	needRoot(t)
	helperBinary(t)
	hubAddr := startHub(t)
	xdg, err := os.MkdirTemp("", "gridlink-xdg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(xdg) })
	if err := os.Chown(xdg, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	sock, _ := startHelperAgent(t, nobody, "XDG_RUNTIME_DIR="+xdg, "HUB="+hubAddr, "NAME=nobodys")
	want := filepath.Join(xdg, "gridlink", "agent.sock")
	if sock != want {
		t.Fatalf("the user's agent listens at %s, want %s", sock, want)
	}
	fi, err := os.Stat(filepath.Dir(want))
	if err != nil || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != nobody {
		t.Errorf("control directory: %v %v", fi.Mode(), err)
	}
	res := runClient(t, nobody, "", "status", "XDG_RUNTIME_DIR="+xdg)
	if res["status"] != "ok nobodys" {
		t.Errorf("the user's client by default: %q, want ok nobodys", res["status"])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := control.Dial(want).Status(ctx); err != nil || st.Node.Name != "nobodys" {
		t.Errorf("root at the user's agent: %+v, %v", st, err)
	}
}

// startHelperAgent runs an agent as uid in a helper process and returns
// its control socket and its log (standard error).
func startHelperAgent(t *testing.T, uid int, env ...string) (string, *testwait.Log) {
	t.Helper()
	cmd := asUID(uid, "agent", env...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	log := &testwait.Log{}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	sock, ok := strings.CutPrefix(strings.TrimSpace(line), "CONTROL ")
	if err != nil || !ok {
		t.Fatalf("agent helper as uid %d: %q, %v (%s)", uid, line, err, log)
	}
	return sock, log
}

// A non-root user's agent serves her and root, and refuses another
// non-root uid, which is told so and logged.
func TestUserAgentRefusesOtherUsers(t *testing.T) {
	needRoot(t)
	helperBinary(t)
	hubAddr := startHub(t)
	sock, log := startHelperAgent(t, nobody, "HUB="+hubAddr, "NAME=nobodys", fmt.Sprintf("CONTROL=@gridlink-test-%d-nobodys", os.Getpid()))
	const other = nobody - 1
	want := fmt.Sprintf("agent of uid %d refuses uid %d", nobody, other)
	if res := runClient(t, other, sock, "status,expose"); res["status"] != "refused "+want || res["expose"] != "refused "+want {
		t.Errorf("uid %d at uid %d's agent: %v, want refused %q", other, nobody, res, want)
	}
	if !strings.Contains(log.String(), want) {
		t.Errorf("the agent's log lacks %q:\n%s", want, log)
	}
	if res := runClient(t, nobody, sock, "status"); res["status"] != "ok nobodys" {
		t.Errorf("the agent's own uid: %v", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := control.Dial(sock).Status(ctx); err != nil || st.Node.Name != "nobodys" {
		t.Errorf("root: %+v, %v", st, err)
	}
}

// The socket directory must be the user's own: another's (say one made
// in /tmp in advance to catch the user's agent) is refused, a link too,
// and a loose mode of her own is tightened.
func TestSocketDir(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	foreign := filepath.Join(base, "foreign")
	os.Mkdir(foreign, 0o777)
	if err := prepareSocketDir(foreign, nobody); err == nil || !strings.Contains(err.Error(), "belongs to uid 0") {
		t.Errorf("a directory of root for uid %d: %v", nobody, err)
	}
	link := filepath.Join(base, "link")
	os.Symlink(foreign, link)
	if err := prepareSocketDir(link, 0); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a link: %v", err)
	}
	if err := prepareSocketDir(foreign, 0); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(foreign); fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %v, want 0700", fi.Mode().Perm())
	}
	fresh := filepath.Join(base, "fresh")
	if err := prepareSocketDir(fresh, 0); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(fresh); fi.Mode().Perm() != 0o700 {
		t.Errorf("new directory mode %v, want 0700", fi.Mode().Perm())
	}
}

// A path socket left by an agent that is gone is replaced; one an agent
// still answers on, or a file that is no socket, is not.
func TestListenControlStale(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.sock")
	l1, err := listenControl(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := listenControl(path); err == nil {
		t.Error("a second listener where an agent answers")
	}
	l1.(*net.UnixListener).SetUnlinkOnClose(false)
	l1.Close() // gone, its socket file left
	l2, err := listenControl(path)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	l2.Close()
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte("keep"), 0o600)
	if _, err := listenControl(plain); err == nil {
		t.Error("listened over a regular file")
	}
	if b, _ := os.ReadFile(plain); string(b) != "keep" {
		t.Error("the regular file was replaced")
	}
}

// Why a stream ended is told only to the uid that made it: root's stream
// through a user's agent is not the user's to ask about (403, named on
// both ends), and root is told.
func TestStreamEndOnlyToItsUID(t *testing.T) {
	needRoot(t)
	helperBinary(t)
	hubAddr := startHub(t)
	sock, log := startHelperAgent(t, nobody, "HUB="+hubAddr, "NAME=nobodys", fmt.Sprintf("CONTROL=@gridlink-test-%d-nobodys-end", os.Getpid()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := control.Dial(sock).Open(ctx, control.ConnectRequest{Addr: "nobodys:7"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.ID() == "" {
		t.Fatal("the agent did not name the stream")
	}
	res := runClient(t, nobody, sock, "end", "STREAM="+s.ID())
	want := fmt.Sprintf("stream %s belongs to uid 0, not to uid %d", s.ID(), nobody)
	if !strings.Contains(res["end"], want) {
		t.Errorf("uid %d asking why root's stream ended: %q, want %q", nobody, res["end"], want)
	}
	if !strings.Contains(log.String(), want) {
		t.Errorf("the agent's log lacks %q:\n%s", want, log)
	}
	if err := s.End(ctx); err != nil {
		t.Errorf("root asking about its own stream: %v", err)
	}
}
