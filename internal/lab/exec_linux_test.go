package lab_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/proxy"
)

// execAccount is a local account for the test (the lab's hosts share this
// machine's /etc/passwd): made with useradd, removed when the test ends.
type execAccount struct {
	name     string
	uid, gid int
	home     string
}

func newExecAccount(t *testing.T) execAccount {
	t.Helper()
	a := execAccount{name: fmt.Sprintf("gllab%d", os.Getpid()%1000000)}
	var err error
	if a.home, err = os.MkdirTemp("", "gllab-home-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(a.home) })
	if out, err := exec.Command("useradd", "-M", "-U", "-d", a.home, "-s", "/bin/sh", a.name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("userdel", a.name).Run() })
	for _, f := range []struct {
		flag string
		v    *int
	}{{"-u", &a.uid}, {"-g", &a.gid}} {
		out, err := exec.Command("id", f.flag, a.name).Output()
		if err == nil {
			*f.v, err = strconv.Atoi(strings.TrimSpace(string(out)))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(a.home, a.uid, a.gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a.home, 0o755); err != nil {
		t.Fatal(err)
	}
	return a
}

type execLab struct {
	t    *testing.T
	topo *topology.Topology
	bin  string
	o    *matrix.Overlay
	acct execAccount
}

// asUser is a command run on host as the test account.
func (x *execLab) asUser(ctx context.Context, host string, args ...string) *exec.Cmd {
	h := labtest.Host(x.t, x.topo, host)
	full := []string{"netns", "exec", lab.HostNS(h), "setpriv", "--reuid=" + strconv.Itoa(x.acct.uid), "--regid=" + strconv.Itoa(x.acct.gid), "--clear-groups",
		"env", "-i", "HOME=" + x.acct.home, "PATH=/usr/bin:/bin", x.bin}
	cmd := exec.CommandContext(ctx, "ip", append(full, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd
}

// userAgent starts user's own agent on host, run by the test account
// with a proxy of the lab CA, and returns its control socket.
func (x *execLab) userAgent(host, user string) string {
	i, err := x.o.IssueUser(user)
	if err != nil {
		x.t.Fatal(err)
	}
	return x.agentWith(host, user, i)
}

// restrictedProxy issues user a proxy of the lab CA restricted to
// restrict, as `gridlink proxy init --restrict` makes one.
func (x *execLab) restrictedProxy(user string, restrict ...string) lab.Issued {
	t := x.t
	c, err := lab.OpenCA()
	if err != nil {
		t.Fatal(err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := c.Authority.Issue(ca.Request{Role: ca.User, Name: user, Key: priv.Public()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(&proxy.Credential{Chain: []*x509.Certificate{cert}, Key: priv}, proxy.Options{Restrict: restrict})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), user+".proxy.pem")
	if err := proxy.Save(f, p); err != nil {
		t.Fatal(err)
	}
	return lab.Issued{CA: c.CertFile(), CRL: c.CRLFile(), Proxy: f}
}

// agentWith starts an agent on host as the test account with i's files
// (copied for it) and the flags extra, named USER-HOST, and returns its
// control socket.
func (x *execLab) agentWith(host, user string, i lab.Issued, extra ...string) string {
	t := x.t
	// the account's copies of the lab CA's files and the proxy
	dir := filepath.Join(x.acct.home, user+"-"+host)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, f := range []struct{ flag, from string }{{"--ca", i.CA}, {"--crl", i.CRL}, {"--proxy", i.Proxy}} {
		b, err := os.ReadFile(f.from)
		if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(dir, filepath.Base(f.from))
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, f.flag, to)
	}
	for _, p := range []string{dir, filepath.Join(dir, filepath.Base(i.CA)), filepath.Join(dir, filepath.Base(i.CRL)), filepath.Join(dir, filepath.Base(i.Proxy))} {
		if err := os.Chown(p, x.acct.uid, x.acct.gid); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "agent.sock")
	h := labtest.Host(t, x.topo, host)
	cmd := x.asUser(context.Background(), host, append([]string{"node", "--name", user + "-" + host, "--hub", matrix.HubAddr(h), "--control", sock}, append(args, extra...)...)...)
	logPath := filepath.Join(t.TempDir(), "agent.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s's agent on %s:\n%s", user, host, b)
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if b, _ := os.ReadFile(logPath); bytes.Contains(b, []byte("attached to hub")) {
			return sock
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("%s's agent on %s did not attach:\n%s", user, host, b)
		}
	}
}

// exec runs gridlink exec on host through the agent at sock, with stdin,
// and returns its exit code, stdout and stderr.
func (x *execLab) exec(host, sock string, stdin io.Reader, args ...string) (int, string, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := x.asUser(ctx, host, append([]string{"exec", "--control", sock}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		x.t.Fatalf("gridlink exec %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// Issue 21 in grid6: gridlink exec from das3v-n1, as a user whose proxy
// the targets' grid-mapfile maps to a local account, runs commands on
// g5k-n1 (non-routed, behind its site's firewall) and hiroshi-n1 (only
// ssh reaches its site): output, exit status, Ctrl-C, a tar stream
// byte-exact; an unmapped user is refused with the reason, which the
// target's log says too. No sshd or ssh key is involved on the way.
// (TestGrid6Overlay: g5k-n1's and hiroshi-n1's agents offer exec, and
// read the grid-mapfile written here.)
func (g *grid6Overlay) exec(t *testing.T) {
	topo, bin, o, mapDir, mapfile := g.topo, g.bin, g.o, g.mapDir, g.mapfile
	acct := newExecAccount(t)
	if err := os.WriteFile(mapfile, []byte(fmt.Sprintf("# issue 21's lab test\n\"/O=%s/OU=user/CN=alice\" %s\n", lab.CAName, acct.name)), 0o644); err != nil {
		t.Fatal(err)
	}
	x := &execLab{t: t, topo: topo, bin: bin, o: o, acct: acct}
	alice := x.userAgent("das3v-n1", "alice")

	t.Run("Hostname", func(t *testing.T) {
		// the lab's hosts share the machine's host name: the namespace
		// says where the command ran
		code, out, errs := x.exec("das3v-n1", alice, nil, "g5k-n1", "--", "hostname; id -un; ip netns identify")
		host, _ := os.Hostname()
		want := host + "\n" + acct.name + "\n" + lab.HostNS(labtest.Host(t, topo, "g5k-n1")) + "\n"
		if code != 0 || out != want {
			t.Errorf("exec g5k-n1 hostname: %d %q %q; want 0 and %q", code, out, errs, want)
		}
	})
	t.Run("ExitStatus", func(t *testing.T) {
		if code, _, errs := x.exec("das3v-n1", alice, nil, "g5k-n1", "exit", "3"); code != 3 {
			t.Errorf("exec g5k-n1 exit 3: %d %q", code, errs)
		}
	})
	t.Run("CtrlC", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := x.asUser(ctx, "das3v-n1", "exec", "--control", alice, "g5k-n1", `trap "echo caught; exit 7" INT; echo ready; sleep 100`)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 6)
		if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
			t.Fatalf("%q %v", buf, err)
		}
		_ = cmd.Process.Signal(syscall.SIGINT)
		rest, _ := io.ReadAll(out)
		err = cmd.Wait()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 || string(rest) != "caught\n" {
			t.Errorf("Ctrl-C: %v, output %q; want exit 7 after \"caught\"", err, rest)
		}
	})
	t.Run("TarByteExact", func(t *testing.T) {
		src := openDir(t)
		writeRandom(t, filepath.Join(src, "tree", "big.bin"), 16<<20+3)
		writeRandom(t, filepath.Join(src, "tree", "sub", "small"), 1001)
		dest := filepath.Join(acct.home, "x")
		tarball, err := exec.Command("tar", "c", "-C", src, "tree").Output()
		if err != nil {
			t.Fatal(err)
		}
		code, _, errs := x.exec("das3v-n1", alice, bytes.NewReader(tarball), "hiroshi-n1", "--", "mkdir", "-p", dest, "&&", "tar", "x", "-C", dest)
		if code != 0 {
			t.Fatalf("tar x on hiroshi-n1: %d %q", code, errs)
		}
		if out, err := exec.Command("diff", "-r", filepath.Join(src, "tree"), filepath.Join(dest, "tree")).CombinedOutput(); err != nil {
			t.Errorf("the tree differs after tar through exec: %v %s", err, out)
		}
	})
	t.Run("RestrictedProxy", func(t *testing.T) {
		// alice's proxy for echo only: refused in the handshake at g5k-n1
		echoOnly := x.agentWith("das3v-n1", "alice-echo", x.restrictedProxy("alice", "echo"))
		code, out, errs := x.exec("das3v-n1", echoOnly, nil, "g5k-n1", "id")
		why := "may not use exec at g5k-n1: its proxy is restricted to [echo]"
		if code != 255 || out != "" || !strings.Contains(errs, why) {
			t.Errorf("a proxy restricted to echo: %d %q %q; want 255 and %q", code, out, errs, why)
		}
		log, _ := os.ReadFile(matrix.LogFile(labtest.Host(t, topo, "g5k-n1"), "node"))
		if !bytes.Contains(log, []byte(why)) {
			t.Errorf("g5k-n1's log does not name the refusal %q:\n%s", why, log)
		}
	})
	t.Run("UserAgent", func(t *testing.T) {
		// an exec service run by the test account itself (alice's own
		// agent on g5k-n1): it runs commands for callers mapped to its
		// account, without switching; one mapped to root is refused
		own := filepath.Join(mapDir, "own-grid-mapfile")
		text := fmt.Sprintf("\"/O=%s/OU=user/CN=alice\" %s\n\"/O=%s/OU=user/CN=carol\" root\n", lab.CAName, acct.name, lab.CAName)
		if err := os.WriteFile(own, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		i, err := x.o.IssueUser("alice")
		if err != nil {
			t.Fatal(err)
		}
		x.agentWith("g5k-n1", "alice", i, "--allow-exec", "--grid-mapfile", own)
		code, out, errs := x.exec("das3v-n1", alice, nil, "alice-g5k-n1", "id -un; ip netns identify")
		if want := acct.name + "\n" + lab.HostNS(labtest.Host(t, topo, "g5k-n1")) + "\n"; code != 0 || out != want {
			t.Errorf("exec at alice's own agent: %d %q %q; want %q", code, out, errs, want)
		}
		carol := x.userAgent("das3v-n1", "carol")
		code, _, errs = x.exec("das3v-n1", carol, nil, "alice-g5k-n1", "id")
		why := fmt.Sprintf(`the exec service of alice-g5k-n1 runs as uid %d, not as root: it runs commands only as uid %d, and "/O=%s/OU=user/CN=carol" maps to root (uid 0)`, acct.uid, acct.uid, lab.CAName)
		if code != 255 || !strings.Contains(errs, why) {
			t.Errorf("carol, mapped to root, at alice's own agent: %d %q; want 255 and %q", code, errs, why)
		}
	})
	t.Run("StartupFigure", func(t *testing.T) {
		// a figure, not an assertion: gridlink exec g5k-n1 true, the
		// client's own start included, against gridlink status (a client
		// start and one question to the local agent)
		median := func(args ...string) time.Duration {
			var ds []time.Duration
			for i := 0; i < 9; i++ {
				start := time.Now()
				cmd := x.asUser(context.Background(), "das3v-n1", args...)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%v: %v %s", args, err, out)
				}
				ds = append(ds, time.Since(start))
			}
			slices.Sort(ds)
			return ds[len(ds)/2]
		}
		e := median("exec", "--control", alice, "g5k-n1", "true")
		s := median("status", "--control", alice)
		t.Logf("gridlink exec g5k-n1 true from das3v-n1: median %v; gridlink status there: %v", e.Round(100*time.Microsecond), s.Round(100*time.Microsecond))
	})
	t.Run("Unmapped", func(t *testing.T) {
		mallory := x.userAgent("das3v-n1", "mallory")
		code, out, errs := x.exec("das3v-n1", mallory, nil, "g5k-n1", "id")
		why := fmt.Sprintf(`subject "/O=%s/OU=user/CN=mallory" is not in the grid-mapfile of g5k-n1`, lab.CAName)
		if code != 255 || out != "" || !strings.Contains(errs, why) {
			t.Errorf("an unmapped user: %d %q %q; want 255 and %q", code, out, errs, why)
		}
		log, _ := os.ReadFile(matrix.LogFile(labtest.Host(t, topo, "g5k-n1"), "node"))
		if !bytes.Contains(log, []byte("exec: refused")) || !bytes.Contains(log, []byte(why)) {
			t.Errorf("g5k-n1's log does not name the refusal:\n%s", log)
		}
	})
}
