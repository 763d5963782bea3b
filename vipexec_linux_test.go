package gridlink

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gridlink/gridlink/internal/testwait"
)

// The real test of gridlink vip exec (issue 19, without root): in a
// network namespace of the test's own (ip netns; nothing leaves it), a
// hub on its loopback, a node with --vip as root, and the agent of an
// unprivileged account (made with useradd) without --vip. As that
// account, `gridlink vip exec` pings the root node's virtual address,
// resolves its name and talks TCP with an echo server there; a second
// exec while the first runs is refused naming the first, another account
// is refused by the agent, both ends naming the reason; the program has
// no capabilities in its namespace.
//
// /dev/net/tun: a site must make it readable and writable by users
// (docs/vip.md); this host's is mode 0600, so the unprivileged commands
// run with a 0666 node of the same device bind-mounted over it in a mount
// namespace of their own (what udev's default gives a site).

// vipexecNS starts the names of the test's namespaces, vipexec-test-PID
// (not gl-: the lab's sweep of leftovers would take them).
const vipexecNS = "vipexec-test-"

// sweepVIPExecLeftovers removes what runs of this test that were killed
// before their cleanup (on a timeout) left: their namespace, and the
// root node's resolv.conf of it in /etc/netns (a make test run left
// those), for each run whose process is gone.
func sweepVIPExecLeftovers(t *testing.T) {
	for _, dir := range []string{"/run/netns", "/etc/netns"} {
		left, _ := filepath.Glob(filepath.Join(dir, vipexecNS+"*"))
		for _, f := range left {
			pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(f), vipexecNS))
			if err != nil || pid <= 0 || syscall.Kill(pid, 0) == nil {
				continue // not the test's name, or a run that still goes on
			}
			if dir == "/run/netns" {
				err = exec.Command("ip", "netns", "delete", filepath.Base(f)).Run()
			} else {
				err = os.RemoveAll(f)
			}
			t.Logf("removed %s, left by a run of this test that was killed (process %d): %v", f, pid, err)
		}
	}
}

// vipexecUser makes (or reuses) a system account for the test; removed
// when the test ends if the test made it.
func vipexecUser(t *testing.T, name string) (uid, gid string) {
	t.Helper()
	if _, err := user.Lookup(name); err != nil {
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
			t.Fatalf("useradd %s: %v %s", name, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("userdel", name).Run() })
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return u.Uid, u.Gid
}

// vipexecProc is a command of the test, its output kept.
type vipexecProc struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	out bytes.Buffer
}

func (p *vipexecProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *vipexecProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// vipexecEnv is the test's namespace, the device node and the binary.
type vipexecEnv struct {
	ns, tunNode, bin string
}

// command is argv run in the namespace: as root (uid ""), or as the
// account uid:gid with the usable /dev/net/tun.
func (e *vipexecEnv) command(uid, gid string, argv ...string) *exec.Cmd {
	if uid == "" {
		return exec.Command("ip", append([]string{"netns", "exec", e.ns}, argv...)...)
	}
	script := `u="$1" g="$2"; shift 2; mount --bind "$0" /dev/net/tun && exec setpriv --reuid="$u" --regid="$g" --clear-groups env -i PATH=/usr/bin:/bin HOME=/tmp "$@"`
	return exec.Command("ip", append([]string{"netns", "exec", e.ns, "unshare", "--mount", "--propagation", "private",
		"sh", "-c", script, e.tunNode, uid, gid}, argv...)...)
}

// start runs cmd until the test ends.
func (e *vipexecEnv) start(t *testing.T, what string, cmd *exec.Cmd) *vipexecProc {
	t.Helper()
	p := &vipexecProc{cmd: cmd}
	cmd.Stdout, cmd.Stderr = p, p
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s:\n%s", what, p.output())
		}
	})
	return p
}

func TestVIPExecWithoutRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root: it makes accounts and a network namespace")
		}
		t.Skip("needs root: it makes accounts and a network namespace")
	}
	for _, tool := range []string{"ip", "unshare", "setpriv", "useradd", "ping", "getent", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	sweepVIPExecLeftovers(t)
	e := &vipexecEnv{ns: fmt.Sprintf("%s%d", vipexecNS, os.Getpid())}
	uidA, gidA := vipexecUser(t, "gl-vipexec-a")
	uidB, gidB := vipexecUser(t, "gl-vipexec-b")

	// the binary where the accounts can run it, and a usable device node
	dir, err := os.MkdirTemp("", "gl-vipexec-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.bin = filepath.Join(dir, "gridlink")
	src := os.Getenv("GRIDLINK_BIN")
	if src == "" {
		src = filepath.Join(dir, "build")
		if out, err := exec.Command("go", "build", "-o", src, "github.com/gridlink/gridlink/cmd/gridlink").CombinedOutput(); err != nil {
			t.Fatalf("build gridlink: %v\n%s", err, out)
		}
	}
	if out, err := exec.Command("cp", src, e.bin).CombinedOutput(); err != nil {
		t.Fatalf("copy gridlink: %v %s", err, out)
	}
	e.tunNode = filepath.Join(dir, "tun")
	if err := unix.Mknod(e.tunNode, unix.S_IFCHR|0o666, int(unix.Mkdev(10, 200))); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.tunNode, 0o666); err != nil { // past the umask
		t.Fatal(err)
	}

	if out, err := exec.Command("ip", "netns", "add", e.ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "delete", e.ns).Run()
		// the root node's resolv.conf of the namespace, which it leaves
		// when killed (and it is killed: vipexecProc's cleanup)
		_ = os.RemoveAll(filepath.Join("/etc/netns", e.ns))
	})
	if out, err := e.command("", "", "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v %s", err, out)
	}

	const hubAddr = "127.0.0.1:7951"
	hub := e.start(t, "hub", e.command("", "", e.bin, "hub", "--listen", hubAddr, "--name", "h1"))
	peer := e.start(t, "root node with --vip", e.command("", "", e.bin, "node", "--hub", hubAddr, "--name", "peer", "--vip", "--verbose"))
	var peerV4 string
	line := regexp.MustCompile(`virtual network on gridlink0: \[(\S+)/\d+ `)
	testwait.Until(t, "the root node's virtual addresses", 30*time.Second, func() bool {
		if m := line.FindStringSubmatch(peer.output()); m != nil {
			peerV4 = m[1]
			return true
		}
		return false
	})
	echo, seen := vipexecEcho(t, e.ns)

	const ctl = "@gl-vipexec-test"
	agent := e.start(t, "the account's agent", e.command(uidA, gidA, e.bin, "node", "--hub", hubAddr, "--name", "user-a", "--control", ctl))
	testwait.Until(t, "the account's agent", 30*time.Second, func() bool { return strings.Contains(agent.output(), "attached to hub") })

	// this host's own /dev/net/tun (mode 0600): what a site must change
	// is named
	if fi, err := os.Stat("/dev/net/tun"); err == nil && fi.Mode().Perm()&0o006 != 0o006 {
		cmd := exec.Command("ip", "netns", "exec", e.ns, "setpriv", "--reuid="+uidA, "--regid="+gidA, "--clear-groups",
			"env", "-i", "PATH=/usr/bin:/bin", "HOME=/tmp", e.bin, "vip", "exec", "--control", ctl, "--", "true")
		out, err := cmd.CombinedOutput()
		want := fmt.Sprintf("/dev/net/tun (mode %#o, owner uid 0) is not readable and writable by uid %s: a site must make it mode 0666", fi.Mode().Perm(), uidA)
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("vip exec with this host's /dev/net/tun: %v, want %q:\n%s", err, want, out)
		}
	}

	// the first exec: ping, a name, TCP, no capabilities; then it waits
	// for its stdin to end
	script := fmt.Sprintf(`set -e
ping -n -c 1 -W 10 %[1]s
getent ahostsv4 peer.grid | head -1
exec 3<>/dev/tcp/peer.grid/%[2]d; echo hello-over-vip >&3; read -r got <&3; echo "echoed: $got"
if ip addr add 100.96.0.99/12 dev gridlink0 2>/dev/null; then echo "CAPABLE"; else echo "no capabilities"; fi
echo READY
read -r wait || true
`, peerV4, echo)
	first := e.command(uidA, gidA, e.bin, "vip", "exec", "--control", ctl, "--", "bash", "-c", script)
	stdin, err := first.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p1 := e.start(t, "the first vip exec", first)
	testwait.Until(t, "the first exec's checks", 60*time.Second, func() bool {
		return strings.Contains(p1.output(), "READY") || p1.cmd.ProcessState != nil
	})
	out := p1.output()
	for _, want := range []string{"1 received", peerV4, "echoed: hello-over-vip", "no capabilities"} {
		if !strings.Contains(out, want) {
			t.Errorf("the first exec's output lacks %q:\n%s", want, out)
		}
	}
	// the echo server saw one of the account's node's virtual addresses,
	// as the hubs' directory has them
	held := regexp.MustCompile(`node user-a \(\S+\) holds virtual addresses (\S+) (\S+)`).FindStringSubmatch(hub.output())
	if a := <-seen; held == nil || (a.String() != held[1] && a.String() != held[2]) {
		t.Errorf("the echo server saw the connection from %s, want one of the account's virtual addresses %v", a, held)
	}

	// the agent's status shows the network on the exec's device, with
	// the root node as a peer that sent and received
	st, err := e.command(uidA, gidA, e.bin, "status", "--control", ctl).CombinedOutput()
	if err != nil || !strings.Contains(string(st), "virtual network on gridlink0") || !strings.Contains(string(st), "peer peer") {
		t.Errorf("status while the exec runs: %v\n%s", err, st)
	}

	// a second exec of the same account while the first runs
	out2, err := e.command(uidA, gidA, e.bin, "vip", "exec", "--control", ctl, "--", "true").CombinedOutput()
	if err == nil || !strings.Contains(string(out2), "already; one device at a time") || !strings.Contains(string(out2), "nsenter --preserve-credentials") {
		t.Errorf("a second exec: %v, want refused naming the first:\n%s", err, out2)
	}
	// another account
	out3, err := e.command(uidB, gidB, e.bin, "vip", "exec", "--control", ctl, "--", "true").CombinedOutput()
	refusal := fmt.Sprintf("agent of uid %s refuses uid %s", uidA, uidB)
	if err == nil || !strings.Contains(string(out3), refusal) {
		t.Errorf("another account's exec: %v, want %q:\n%s", err, refusal, out3)
	}
	testwait.Until(t, "the agent to log both refusals", 10*time.Second, func() bool {
		return strings.Contains(agent.output(), refusal) && strings.Contains(agent.output(), "one device at a time")
	})

	// the first exec ends; the agent drops the device and takes the next,
	// in a row
	stdin.Close()
	if err := p1.cmd.Wait(); err != nil {
		t.Errorf("the first exec: %v", err)
	}
	// (the agent frees the slot before the exec exits: the next one in a
	// script is taken at once)
	if out, err := e.command(uidA, gidA, e.bin, "vip", "exec", "--control", ctl, "--no-names", "--", "true").CombinedOutput(); err != nil {
		t.Errorf("the exec after the first: %v\n%s", err, out)
	}
	// the exit status is the program's
	if out, err := e.command(uidA, gidA, e.bin, "vip", "exec", "--control", ctl, "--", "sh", "-c", "exit 7").CombinedOutput(); err == nil || exitCode(err) != 7 {
		t.Errorf("exec of exit 7: %v\n%s", err, out)
	}

	// an agent with --vip has its network on the host already
	if out, err := e.command("", "", e.bin, "vip", "exec", "--control", "@gridlink-agent", "--", "true").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "runs on the host's device gridlink0 (gridlink node --vip): run the program directly") {
		t.Errorf("vip exec with a --vip agent: %v\n%s", err, out)
	}

	// SIGTERM to exec reaches the program; exec's status says so
	term := e.command(uidA, gidA, e.bin, "vip", "exec", "--control", ctl, "--", "sleep", "60")
	pt := e.start(t, "the exec ended by SIGTERM", term)
	vipexecChild(t, term.Process.Pid)
	_ = term.Process.Signal(syscall.SIGTERM)
	if err := term.Wait(); exitCode(err) != 128+int(syscall.SIGTERM) {
		t.Errorf("exec of sleep, SIGTERM: %v, want status %d\n%s", err, 128+int(syscall.SIGTERM), pt.output())
	}

	// an exec killed outright: the agent sees its connection end and
	// takes the next device (the program, orphaned, is ended here)
	killed := e.command(uidA, gidA, e.bin, "vip", "exec", "--control", ctl, "--", "sleep", "60")
	e.start(t, "the exec killed", killed)
	orphan := vipexecChild(t, killed.Process.Pid)
	_ = killed.Process.Kill()
	_ = syscall.Kill(orphan, syscall.SIGKILL) // it holds exec's output pipe
	_ = killed.Wait()
	testwait.Until(t, "the agent to free the killed exec's device", 10*time.Second, func() bool {
		out, err := e.command(uidA, gidA, e.bin, "vip", "exec", "--control", ctl, "--no-names", "--", "true").CombinedOutput()
		if err != nil && !strings.Contains(string(out), "one device at a time") {
			t.Fatalf("an exec after the killed one: %v\n%s", err, out)
		}
		return err == nil
	})
}

// vipexecChild is the pid of the namespace's process of the exec pid
// (its one child), once it runs the program.
func vipexecChild(t *testing.T, pid int) int {
	t.Helper()
	var child int
	testwait.Until(t, "the exec's program", 30*time.Second, func() bool {
		// (Go forks from any of its threads: each lists its own children)
		files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		var b []byte
		for _, f := range files {
			c, _ := os.ReadFile(f)
			b = append(append(b, c...), ' ')
		}
		for _, f := range strings.Fields(string(b)) {
			fmt.Sscan(f, &child)
			if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", child)); err == nil && strings.TrimSpace(string(cmd)) == "sleep" {
				return true
			}
		}
		return false
	})
	return child
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// vipexecEcho serves TCP echo in the namespace ns on every address
// (the root node's virtual ones among them): its port, and the first
// client's address.
func vipexecEcho(t *testing.T, ns string) (int, <-chan netip.Addr) {
	t.Helper()
	var ln net.Listener
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		orig, oerr := os.Open("/proc/thread-self/ns/net")
		f, ferr := os.Open("/var/run/netns/" + ns)
		if err = errors.Join(oerr, ferr); err != nil {
			return
		}
		defer orig.Close()
		defer f.Close()
		if err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			return
		}
		ln, err = net.Listen("tcp", ":0")
		// back, or the thread ends with the goroutine (still locked)
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	<-done
	if err != nil {
		t.Fatalf("echo server in %s: %v", ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	seen := make(chan netip.Addr, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case seen <- c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap():
			default:
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = io.WriteString(c, line)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, seen
}
