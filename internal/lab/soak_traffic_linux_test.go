package lab_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/status"
)

// soakData is the host of the transfer service cp copies to and from.
const soakData = "das3v-n1"

// soakFileSize is the size of each file cp carries.
const soakFileSize = 4 << 20

// traffic starts the soak's steady traffic, each loop until ctx ends.
func (S *soak) traffic(ctx context.Context, wg *sync.WaitGroup) {
	t := S.t
	root := openDir(t)
	data := S.host(soakData)
	id, err := S.o.Issue("soak-data")
	if err != nil {
		t.Fatal(err)
	}
	serve := startIn(t, data, "soak-serve", append([]string{S.bin, "serve", "--name", "soak-data", "--hub", matrix.HubAddr(data),
		"--root", root, "--metrics", fmt.Sprintf(":%d", serveMetrics)}, id.Args()...)...)
	serve.waitLog(t, "serving", 20*time.Second)
	S.track("serve das3v-n1", data, serveMetrics, serve.cmd.Process.Pid)
	cred, err := S.o.IssueUser("alice")
	if err != nil {
		t.Fatal(err)
	}
	sshArgs := S.startSSHD(S.host("rockstar-n1"))

	wg.Go(func() { S.cpLoop(ctx, "cp get", S.host("g5k-n1"), root, cred.Args(), false) })
	wg.Go(func() { S.cpLoop(ctx, "cp put", S.host("hiroshi-n1"), root, cred.Args(), true) })
	wg.Go(func() { S.pingLoop(ctx, S.host("desktop-pc")) })
	wg.Go(func() { S.pingLoop(ctx, S.host("g5k-n1")) })
	wg.Go(func() { S.sshLoop(ctx, S.host("das3d-n1"), "rockstar-n1.grid", sshArgs) })
	S.streams(ctx, wg, soakStreams)
}

// cpLoop copies files between host and the transfer service (whose root
// is root) until ctx ends: a put with put, else a get; each file new
// random bytes, compared byte for byte with its source after a copy
// that says it succeeded.
func (S *soak) cpLoop(ctx context.Context, kind string, h *topology.Host, root string, cred []string, put bool) {
	local := openDir(S.t)
	for i := 0; ctx.Err() == nil; i++ {
		name := fmt.Sprintf("%s-%d.bin", h.ID(), i)
		src, dst := filepath.Join(root, name), filepath.Join(local, name)
		from, to := "soak-data:"+name, dst
		if put {
			src, dst = dst, src
			from, to = src, "soak-data:"+name
		}
		writeFast(S.t, src, soakFileSize)
		began := time.Now()
		// a copy gets three minutes, and may finish after the soak's end
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
		argv := append([]string{"netns", "exec", lab.HostNS(h), S.bin, "cp", "--json", "--quiet", "--hub", matrix.HubAddr(h)}, cred...)
		cmd := exec.CommandContext(cctx, "ip", append(argv, from, to)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		cancel()
		op := fmt.Sprintf("%s %s %s", kind, h.ID(), name)
		path := S.path(h.ID(), soakData)
		var sum status.Copy
		jerr := json.Unmarshal(out.Bytes(), &sum)
		switch {
		case err != nil || jerr != nil || sum.Failure != "":
			S.count(kind, "bytes", false, 0)
			S.fail(op, path, began, fmt.Sprintf("%v; %s %s", err, sum.Failure, lastLines(errb.String(), 3)))
		default:
			bad, missing := compareFiles(src, dst)
			S.corrupt.Add(bad)
			S.lost.Add(missing)
			if bad+missing > 0 {
				S.fail(op, path, began, fmt.Sprintf("cp said it succeeded, but %d bytes differ and %d are missing", bad, missing))
			}
			S.count(kind, "bytes", bad+missing == 0, soakFileSize-bad-missing)
			if sum.Attempts > 1 {
				S.fail(op+" (recovered)", path, began, fmt.Sprintf("cp took %d sessions (dropped connections it resumed after); %s", sum.Attempts, lastLines(errb.String(), 3)))
			}
		}
		os.Remove(src)
		os.Remove(dst)
		pause(ctx, 2*time.Second)
	}
}

// compareFiles counts the bytes of dst that differ from src's and the
// bytes of src that dst lacks.
func compareFiles(src, dst string) (bad, missing int64) {
	a, err := os.ReadFile(src)
	if err != nil {
		return 0, 0
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		return 0, int64(len(a))
	}
	if len(b) < len(a) {
		missing = int64(len(a) - len(b))
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			bad++
		}
	}
	return bad, missing
}

// pingLoop pings every other node agent in turn from h's agent, one
// every 2 s, until ctx ends. A node whose agent a chaos event has down
// is pinged too: that failure is the chaos's.
func (S *soak) pingLoop(ctx context.Context, h *topology.Host) {
	var targets []*topology.Host
	for _, n := range S.o.Nodes() {
		if n != h {
			targets = append(targets, n)
		}
	}
	for i := 0; ctx.Err() == nil; i++ {
		dst := targets[i%len(targets)]
		began := time.Now()
		// Longer than the agent's own 30 s bound on a ping, so that a ping
		// that cannot finish (a partition) ends with the agent's reason,
		// not killed by this bound first.
		cctx, cancel := context.WithTimeout(ctx, 45*time.Second)
		out, err := S.o.Run(cctx, h, "ping", "--json", "--dials", "1", "--count", "3", dst.ID())
		cancel()
		if ctx.Err() != nil {
			return
		}
		var pr status.Ping
		jerr := json.Unmarshal(out, &pr)
		ok := err == nil && jerr == nil && pr.Error == "" && len(pr.RTTMS) == 3
		S.count("ping", "round trips", ok, int64(len(pr.RTTMS)))
		if !ok {
			S.fail(fmt.Sprintf("ping %s -> %s", h.ID(), dst.ID()), S.path(h.ID(), dst.ID()), began, fmt.Sprintf("%s (%v)", pr.Error, err))
		}
		pause(ctx, 2*time.Second)
	}
}

// sshLoop keeps an ssh session from h to target (through ProxyCommand
// gridlink nc) running a counter loop, every line checked to be the
// next number; a session that ends before ctx is a failure with ssh's
// words, and another starts.
func (S *soak) sshLoop(ctx context.Context, h *topology.Host, target string, sshArgs []string) {
	const script = `i=0; while :; do echo $i; i=$((i+1)); sleep 0.5; done`
	path := S.path(h.ID(), strings.TrimSuffix(target, ".grid"))
	for ctx.Err() == nil {
		began := time.Now()
		argv := append([]string{"netns", "exec", lab.HostNS(h), "ssh"}, sshArgs...)
		argv = append(argv, "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=6", "-p", "2222", "root@"+target, script)
		cmd := exec.Command("ip", argv...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var errb bytes.Buffer
		cmd.Stderr = &errb
		outp, err := cmd.StdoutPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			S.fail("ssh "+h.ID()+" -> "+target, path, began, err.Error())
			return
		}
		stop := context.AfterFunc(ctx, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) })
		sc := bufio.NewScanner(outp)
		want, lines, broken := 0, int64(0), ""
		for sc.Scan() {
			n, perr := strconv.Atoi(sc.Text())
			switch {
			case perr != nil:
				S.corrupt.Add(int64(len(sc.Text()) + 1))
				broken = fmt.Sprintf("line %d is %q, not a counter", want, sc.Text())
			case n > want:
				S.lost.Add(int64(n - want))
				broken = fmt.Sprintf("counter jumped from %d to %d (%d lines lost)", want-1, n, n-want)
			case n < want:
				S.corrupt.Add(int64(len(sc.Text()) + 1))
				broken = fmt.Sprintf("counter went back from %d to %d", want-1, n)
			default:
				lines++
			}
			want = n + 1
		}
		werr := cmd.Wait()
		endedByUs := !stop() // the soak's end stopped it
		S.count("ssh", "lines", broken == "", lines)
		if broken != "" {
			S.fail("ssh "+h.ID()+" -> "+target, path, began, broken)
		}
		if !endedByUs {
			S.fail("ssh "+h.ID()+" -> "+target, path, began, fmt.Sprintf("the session ended after %d lines: %v: %s", lines, werr, lastLines(errb.String(), 3)))
			pause(ctx, 2*time.Second)
		}
	}
}

// startSSHD runs OpenSSH's sshd on h's loopback, port 2222, exposed
// through h's agent as H:2222, and returns the ssh options that reach
// it through ProxyCommand gridlink nc, the host key checked strictly.
func (S *soak) startSSHD(h *topology.Host) []string {
	t := S.t
	dir := openDir(S.t)
	keygen := func(name string) string {
		if b, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, name)).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, b)
		}
		pub, _ := os.ReadFile(filepath.Join(dir, name+".pub"))
		return string(pub)
	}
	hostPub, userPub := keygen("host"), keygen("user")
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("authorized_keys", userPub)
	known := write("known_hosts", fmt.Sprintf("[%s.grid]:2222 %s", h.ID(), hostPub))
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
`, dir))
	startIn(S.t, h, "soak-sshd", "/usr/sbin/sshd", "-D", "-e", "-f", cfg)
	ex := startIn(S.t, h, "soak-expose", S.bin, "expose", "2222")
	ex.waitLog(S.t, "reachable as "+h.ID()+":2222", 20*time.Second)
	S.track("expose "+h.ID(), h, 0, ex.cmd.Process.Pid)
	return []string{"-i", filepath.Join(dir, "user"), "-F", "/dev/null",
		"-o", "UserKnownHostsFile=" + known, "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
		"-o", "ProxyCommand=" + S.bin + " nc %h:%p"}
}

// lastLines is the last n lines of s, on one line.
func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, " | ")
}
