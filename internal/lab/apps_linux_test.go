package lab_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// python is Debian's interpreter, which has python3-socks and
// python3-socksio (make deps), not whatever python3 is first on PATH.
const python = "/usr/bin/python3"

// proc is a program running in a lab host, ended when the test ends.
type proc struct {
	cmd *exec.Cmd
	log string
}

// startIn starts argv in host h (its own process group, so that the
// test's cleanup ends it and its children), output to a log file.
func startIn(t *testing.T, h *topology.Host, name string, argv ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("ip", append([]string{"netns", "exec", lab.HostNS(h)}, argv...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s on %s: %v", name, h.ID(), err)
	}
	p := &proc{cmd: cmd, log: logPath}
	t.Cleanup(p.stop)
	return p
}

// stop ends the process group, once.
func (p *proc) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

func (p *proc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// waitLog waits until the process's output contains s.
func (p *proc) waitLog(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.output(), s) {
		if time.Now().After(deadline) || p.cmd.ProcessState != nil {
			t.Fatalf("%v: no %q in %v; output:\n%s", p.cmd.Args, s, timeout, p.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runIn runs argv in host h with stdin and returns its stdout, failing
// the test with stderr if it fails.
func runIn(t *testing.T, ctx context.Context, h *topology.Host, stdin []byte, argv ...string) []byte {
	t.Helper()
	out, errb, err := tryIn(ctx, h, stdin, argv...)
	if err != nil {
		t.Fatalf("%s on %s: %v\n%s", strings.Join(argv, " "), h.ID(), err, errb)
	}
	return out
}

// tryIn runs argv in host h with stdin and returns its stdout, its
// stderr and how it ended.
func tryIn(ctx context.Context, h *topology.Host, stdin []byte, argv ...string) ([]byte, []byte, error) {
	return tryInNS(ctx, lab.HostNS(h), stdin, argv...)
}

// tryInNS is tryIn in the namespace ns (a gateway's, say).
func tryInNS(ctx context.Context, ns string, stdin []byte, argv ...string) ([]byte, []byte, error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, argv...)...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &out, &errb
	err := cmd.Run()
	return out.Bytes(), errb.Bytes(), err
}

// appsLab is the shared bring-up of the apps tests: grid6 with its
// overlay, every matrix host's agent able to reach the others by name.
type appsLab struct {
	topo    *topology.Topology
	bin     string
	o       *matrix.Overlay
	desktop *topology.Host // desktop-pc: behind a home NAT
	g5k     *topology.Host // g5k-n1: non-routed, no route out
	hiroshi *topology.Host // hiroshi-n1: non-routed behind a NAT that lets only ssh out
	das3v   *topology.Host // das3v-n1: public
}

// Programs that cannot link gridlink use it unchanged on grid6: OpenSSH
// through `gridlink nc`, curl and Python through `gridlink socks`, a BIND
// by a SOCKS library not written here, and bad input that must not stop
// the SOCKS server; then issue 17's lab cases (nc to the built-in echo,
// SOCKS4 and unknown address types answered, quiet timestamped hub logs)
// (TestGrid6Overlay).
func (g *grid6Overlay) apps(t *testing.T) {
	topo, bin, o, start := g.topo, g.bin, g.o, g.start
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	L := &appsLab{topo: topo, bin: bin, o: o,
		desktop: labtest.Host(t, topo, "desktop-pc"), g5k: labtest.Host(t, topo, "g5k-n1"),
		hiroshi: labtest.Host(t, topo, "hiroshi-n1"), das3v: labtest.Host(t, topo, "das3v-n1")}
	// until the hubs know every node: each client reaches each server once.
	for _, src := range []*topology.Host{L.desktop, L.das3v} {
		for _, dst := range []*topology.Host{L.g5k, L.hiroshi, L.das3v, L.desktop} {
			for src != dst {
				if ok, _ := o.Reaches(ctx, src, dst); ok {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("%s cannot reach %s through the overlay", src.ID(), dst.ID())
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	t.Logf("overlay up and reachable in %v", time.Since(start).Round(time.Millisecond))
	// one SOCKS server on desktop serves curl, Python and the bad clients.
	socksProc := startIn(t, L.desktop, "socks-desktop", bin, "socks", "--listen", "127.0.0.1:1080", "--verbose")
	socksProc.waitLog(t, "listening on", 10*time.Second)

	t.Run("OpenSSH", func(t *testing.T) { L.openSSH(t, ctx) })
	t.Run("curl", func(t *testing.T) { L.curl(t, ctx) })
	t.Run("BIND", func(t *testing.T) { L.bind(t, ctx) })
	t.Run("Python100MiB", func(t *testing.T) { L.python(t, ctx) })
	t.Run("BadInput", func(t *testing.T) { L.badInput(t, ctx, socksProc) })
	t.Run("NCEcho", func(t *testing.T) { L.ncEcho(t, ctx) })
	t.Run("SOCKSProtocolReplies", func(t *testing.T) { L.socksProtocolReplies(t) })
	t.Run("HubLogs", func(t *testing.T) { L.hubLogs(t, start) })
}

// openSSH: sshd on g5k-n1 listens on its loopback only and is exposed
// with `gridlink expose`; ssh and scp on desktop-pc reach it through
// `ProxyCommand gridlink nc %h:%p`, checking the host key strictly.
func (L *appsLab) openSSH(t *testing.T, ctx context.Context) {
	dir := t.TempDir()
	keygen := func(name string) string {
		if b, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, name)).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, b)
		}
		pub, _ := os.ReadFile(filepath.Join(dir, name+".pub"))
		return string(pub)
	}
	hostPub := keygen("host")
	userPub := keygen("user")
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("authorized_keys", userPub)
	known := write("known_hosts", "[g5k-n1.grid]:2222 "+hostPub)
	cfg := write("sshd_config", fmt.Sprintf(`Port 2222
ListenAddress 127.0.0.1
HostKey %[1]s/host
AuthorizedKeysFile %[1]s/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
StrictModes no
PidFile none
Subsystem sftp /usr/lib/openssh/sftp-server
`, dir))
	startIn(t, L.g5k, "sshd-g5k", "/usr/sbin/sshd", "-D", "-e", "-f", cfg)
	ex := startIn(t, L.g5k, "expose-sshd", L.bin, "expose", "2222")
	ex.waitLog(t, "reachable as g5k-n1:2222", 10*time.Second)

	sshOpts := []string{"-i", filepath.Join(dir, "user"), "-F", "/dev/null",
		"-o", "UserKnownHostsFile=" + known, "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
		"-o", "ProxyCommand=" + L.bin + " nc %h:%p"}
	// the command runs on g5k-n1: its output names g5k-n1's lab address.
	args := append([]string{"ssh"}, sshOpts...)
	args = append(args, "-p", "2222", "root@g5k-n1.grid", "ip -o -4 addr show; echo done-$((6*7))")
	out := string(runIn(t, ctx, L.desktop, nil, args...))
	if !strings.Contains(out, L.g5k.PrimaryAddr().String()+"/") || !strings.Contains(out, "done-42") {
		t.Fatalf("remote command's output does not show g5k-n1 (%s):\n%s", L.g5k.PrimaryAddr(), out)
	}
	// scp a file there (SFTP), then back under another name.
	data := make([]byte, 3<<20+17)
	rand.Read(data)
	src := write("payload", string(data))
	remote := fmt.Sprintf("/tmp/gridlink-apps-%d", os.Getpid())
	back := filepath.Join(dir, "payload.back")
	defer os.Remove(remote)
	scp := func(from, to string) {
		a := append([]string{"scp", "-q", "-P", "2222"}, sshOpts...)
		runIn(t, ctx, L.desktop, nil, append(a, from, to)...)
	}
	scp(src, "root@g5k-n1.grid:"+remote)
	sum := sha256.Sum256(data)
	args = append([]string{"ssh"}, sshOpts...)
	args = append(args, "-p", "2222", "root@g5k-n1.grid", "sha256sum "+remote)
	if out := string(runIn(t, ctx, L.desktop, nil, args...)); !strings.HasPrefix(out, fmt.Sprintf("%x ", sum)) {
		t.Fatalf("sha256sum on g5k-n1: %s, want %x", out, sum)
	}
	scp("root@g5k-n1.grid:"+remote, back)
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
		t.Fatalf("the file copied back differs (%d bytes, want %d)", len(got), len(data))
	}
}

// curl fetches a page from Python's http.server on hiroshi-n1, exposed as
// hiroshi-n1.grid:80 (and named web), through gridlink socks on desktop-pc,
// then through gridlink forward to hiroshi-n1:web.
func (L *appsLab) curl(t *testing.T, ctx context.Context) {
	dir := t.TempDir()
	page := fmt.Sprintf("<html>gridlink apps test %d</html>\n", time.Now().UnixNano())
	if err := os.WriteFile(filepath.Join(dir, "page.html"), []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startIn(t, L.hiroshi, "http-server", python, "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", dir)
	ex := startIn(t, L.hiroshi, "expose-http", L.bin, "expose", "8000", "--port", "80", "--name", "web")
	ex.waitLog(t, "reachable as hiroshi-n1:80", 10*time.Second)
	var out []byte
	for i := 0; ; i++ { // http.server may still be starting
		o, errb, err := tryIn(ctx, L.desktop, nil, "curl", "-sS", "--fail", "--max-time", "30",
			"--socks5-hostname", "127.0.0.1:1080", "http://hiroshi-n1.grid/page.html")
		if err == nil {
			out = o
			break
		}
		if i == 20 {
			t.Fatalf("curl: %v\n%s\nserver:\n%s", err, errb, srv.output())
		}
		time.Sleep(250 * time.Millisecond)
	}
	if string(out) != page {
		t.Fatalf("curl got %q, want %q", out, page)
	}
	// and through gridlink forward, by the service's name.
	fw := startIn(t, L.desktop, "forward-web", L.bin, "forward", "127.0.0.1:8081", "hiroshi-n1:web")
	fw.waitLog(t, "gridlink forward:", 10*time.Second)
	out = runIn(t, ctx, L.desktop, nil, "curl", "-sS", "--fail", "--max-time", "30", "http://127.0.0.1:8081/page.html")
	if string(out) != page {
		t.Fatalf("curl through gridlink forward got %q, want %q", out, page)
	}
}

// bind: socksio (not written here) sends BIND to gridlink socks on
// das3v-n1 for the peer desktop-pc.grid (DST.ADDR: the only node it
// admits); the peer, on desktop-pc, reaches the address the first reply
// names with gridlink nc; the bytes and their hash go both ways.
func (L *appsLab) bind(t *testing.T, ctx context.Context) {
	sp := startIn(t, L.das3v, "socks-das3v", L.bin, "socks", "--listen", "127.0.0.1:1081")
	sp.waitLog(t, "listening on", 10*time.Second)
	script, _ := filepath.Abs("testdata/apps/bind_socksio.py")
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", lab.HostNS(L.das3v), python, script, "127.0.0.1", "1081", "desktop-pc.grid")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		cmd.Wait()
		t.Fatalf("socksio BIND: no bound address: %s", errb.String())
	}
	var host string
	var port int
	if _, err := fmt.Sscanf(lines.Text(), "bound %s %d", &host, &port); err != nil || host != "das3v-n1.grid" {
		t.Fatalf("first BIND reply: %q (%v)", lines.Text(), err)
	}
	msg := bytes.Repeat([]byte("passive open through the overlay\n"), 50000)
	out := runIn(t, ctx, L.desktop, msg, L.bin, "nc", fmt.Sprintf("%s:%d", host, port))
	if want := fmt.Sprintf("sha256 %x\n", sha256.Sum256(msg)); string(out) != want {
		t.Fatalf("the peer got %q, want %q", out, want)
	}
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "peer desktop-pc.grid ") {
		t.Fatalf("second BIND reply: %q %s", lines.Text(), errb.String())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("socksio script: %v\n%s", err, errb.String())
	}
}

// python: PySocks on desktop-pc exchanges 100 MiB each way with an echo
// server on g5k-n1, through gridlink socks and gridlink expose.
func (L *appsLab) python(t *testing.T, ctx context.Context) {
	script, _ := filepath.Abs("testdata/apps/exchange_pysocks.py")
	startIn(t, L.g5k, "echo-g5k", python, script, "echo", "9000")
	ex := startIn(t, L.g5k, "expose-echo", L.bin, "expose", "9000")
	ex.waitLog(t, "reachable as g5k-n1:9000", 10*time.Second)
	start := time.Now()
	var out []byte
	for i := 0; ; i++ {
		o, errb, err := tryIn(ctx, L.desktop, nil, python, script, "client", "1080", "g5k-n1.grid", "9000", "100")
		if err == nil {
			out = o
			break
		}
		// only a server still starting (refused) is worth another try.
		if i == 10 || !strings.Contains(string(errb), "refused") {
			t.Fatalf("PySocks exchange: %v\n%s", err, errb)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if !strings.HasPrefix(string(out), "ok ") {
		t.Fatalf("PySocks exchange: %s", out)
	}
	t.Logf("100 MiB each way in %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(out)))
}
