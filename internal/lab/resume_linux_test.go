package lab_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"github.com/gridlink/gridlink/internal/testwait"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/perf"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/status"
)

// resumeLab is the bring-up of hubpaths for issue 20's resumable links:
// four hubs linked in a square (a1-b1 and a2-b2 across the wide area, a1-a2
// and b1-b2 inside the sites), a node agent, a transfer service and a perf
// server at b-n, a node agent at a-n; a-n and b-n reach each other only
// routed.
type resumeLab struct {
	*natHubs
	an, bn  *topology.Host
	root    string // the transfer service's root
	size    int64  // of the file cp copies
	serve   *proc  // gridlink serve at b-n
	perfSrv *proc  // gridlink perf --serve at b-n
	ssh     []string
	sshDir  string
}

// resumeSize is the size of the file the cases copy: 256 MiB, or
// $GRIDLINK_RESUME_SIZE (bytes, suffix K, M or G: 1G for the issue's
// figure).
func resumeSize(t *testing.T) int64 {
	s := os.Getenv("GRIDLINK_RESUME_SIZE")
	if s == "" {
		return 256 << 20
	}
	mult := int64(1)
	switch s[len(s)-1] {
	case 'K', 'k':
		mult = 1 << 10
	case 'M', 'm':
		mult = 1 << 20
	case 'G', 'g':
		mult = 1 << 30
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		t.Fatalf("GRIDLINK_RESUME_SIZE=%q: want a byte count (suffix K, M or G)", os.Getenv("GRIDLINK_RESUME_SIZE"))
	}
	return n * mult
}

// lanHub is hub host h's address on its site's lan, where the site's
// nodes reach it.
func lanHub(h *topology.Host) string {
	for _, ifc := range h.Ifaces {
		if ifc.Net.Name == "lan" {
			return fmt.Sprintf("%s:7946", ifc.Addr)
		}
	}
	return hubAddr(h)
}

// nodeArgs are the arguments of a node named name in h's site: its
// site's hubs, h1 first, and a certificate of the lab CA.
func (L *resumeLab) nodeArgs(h *topology.Host, name string) []string {
	s := h.Site.Name
	argv := []string{"--name", name, "--hub", lanHub(L.host(s + "-h1")), "--hub", lanHub(L.host(s + "-h2"))}
	return append(argv, L.issue(ca.Node, name).Args()...)
}

// Issue 20 on hubpaths: routed links that outlive the hubs and paths
// beneath them (resumable links: a connection set up again, by whatever
// path works then, takes over what the dead one carried):
//
//   - HubDeath: a routed gridlink cp (256 MiB, $GRIDLINK_RESUME_SIZE)
//     and an scp through ssh's ProxyCommand gridlink nc, both from a-n
//     whose node and agent are attached to a1: a1 is killed (-9) mid-
//     flight. Both complete, the bytes identical, no error, cp in one
//     attempt, its longest stall under 2 s.
//   - PerfHubDeath: a routed gridlink perf run whose server's hub (b1)
//     is killed: it completes, the server counting every byte sent,
//     longest stall under 2 s.
//   - Cut: the only path left (a2-b2) cut for 10 s (nft drop), then
//     restored, under a cp and a perf run: both resume and complete.
//   - CutTooLong: cut for longer than the limit (--resume-timeout 2s):
//     cp and perf fail, and so do their services, each with an error
//     naming the lost link, its connection, how and when it died.
func TestHubPathsResume(t *testing.T) {
	N := &natHubs{t: t, bin: gridlinkBin(t), hubs: map[string]*proc{}}
	N.topo = labtest.Up(t, "hubpaths", nil)
	L := &resumeLab{natHubs: N, an: N.host("a-n"), bn: N.host("b-n"), size: resumeSize(t)}
	up := time.Now()
	defer func() { t.Logf("the cases took %v after the bring-up", time.Since(up).Round(100*time.Millisecond)) }()
	a1, a2, b1, b2 := L.host("a-h1"), L.host("a-h2"), L.host("b-h1"), L.host("b-h2")
	L.startHub(b1, "b1", L.issue(ca.Hub, "b1"))
	L.startHub(b2, "b2", L.issue(ca.Hub, "b2"), b1)
	L.startHub(a1, "a1", L.issue(ca.Hub, "a1"), b1)
	L.startHub(a2, "a2", L.issue(ca.Hub, "a2"), a1, b2)
	square := map[*topology.Host][]string{a1: {"a2", "b1", "b2"}, a2: {"a1", "b1", "b2"}, b1: {"a1", "a2", "b2"}, b2: {"a1", "a2", "b1"}}
	testwait.Until(t, "the hubs to link in a square", 30*time.Second, func() bool {
		for h, names := range square {
			for _, n := range names {
				if !L.reachable(h, n, identity.ID{}) {
					return false
				}
			}
		}
		return true
	})
	L.root = openDir(t)
	startIn(t, L.bn, "node-b-n", append([]string{L.bin, "node", "--verbose"}, L.nodeArgs(L.bn, "b-n")...)...)
	startIn(t, L.an, "node-a-n", append([]string{L.bin, "node", "--verbose"}, L.nodeArgs(L.an, "a-n")...)...)
	L.serve = startIn(t, L.bn, "serve", append([]string{L.bin, "serve", "--root", L.root}, L.nodeArgs(L.bn, "b-data")...)...)
	L.perfSrv = startIn(t, L.bn, "perf-serve", append([]string{L.bin, "perf", "--serve"}, L.nodeArgs(L.bn, "b-perf")...)...)
	L.serve.waitLog(t, "serving", 20*time.Second)
	L.perfSrv.waitLog(t, "listening on", 20*time.Second)
	L.startSSHD(t)
	t.Logf("overlay up %v after the bring-up", time.Since(up).Round(100*time.Millisecond))

	t.Run("HubDeath", L.hubDeath)
	t.Run("PerfHubDeath", L.perfHubDeath)
	t.Run("Cut", L.cut)
	t.Run("CutTooLong", L.cutTooLong)
}

// startSSHD runs OpenSSH's sshd at b-n on its loopback, exposed through
// b-n's agent as b-n:2222, and sets the ssh options that reach it from
// a-n through ProxyCommand gridlink nc, the host key checked strictly.
func (L *resumeLab) startSSHD(t *testing.T) {
	dir := openDir(t)
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
	known := write("known_hosts", "[b-n.grid]:2222 "+hostPub)
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
	startIn(t, L.bn, "sshd-b-n", "/usr/sbin/sshd", "-D", "-e", "-f", cfg)
	ex := startIn(t, L.bn, "expose-sshd", L.bin, "expose", "2222")
	ex.waitLog(t, "reachable as b-n:2222", 20*time.Second)
	L.sshDir = dir
	L.ssh = []string{"-i", filepath.Join(dir, "user"), "-F", "/dev/null",
		"-o", "UserKnownHostsFile=" + known, "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
		"-o", "ProxyCommand=" + L.bin + " nc %h:%p"}
}

// run is a command in a lab host whose stderr lines are stamped with
// when they came.
type run struct {
	name  string
	cmd   *exec.Cmd
	out   bytes.Buffer
	done  chan struct{}
	err   error
	mu    sync.Mutex
	lines []stamped
}

type stamped struct {
	at   time.Time
	line string
}

func startRun(t *testing.T, ctx context.Context, h *topology.Host, name string, argv ...string) *run {
	t.Helper()
	r := &run{name: name, done: make(chan struct{})}
	r.cmd = exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", lab.HostNS(h)}, argv...)...)
	r.cmd.Stdout = &r.out
	errp, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(errp)
		for sc.Scan() {
			r.mu.Lock()
			r.lines = append(r.lines, stamped{time.Now(), sc.Text()})
			r.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, errp)
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.done
	})
	return r
}

func (r *run) ended() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// wait waits for the command to end, up to d.
func (r *run) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(d):
		t.Fatalf("%s still runs after %v; its output:\n%s", r.name, d, r.stderr())
		return nil
	}
}

func (r *run) stderr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, l := range r.lines {
		b.WriteString(l.line + "\n")
	}
	return b.String()
}

// cpLine is a plain progress line of gridlink cp:
// "  0.3 s  total 64.0 MiB / 256.0 MiB, 0 / 1 files, 48.0 MiB/s, ETA 4s".
var cpLine = regexp.MustCompile(`^\s*[0-9.]+ s  total ([0-9.]+) (B|KiB|MiB|GiB) / `)

// progress is the bytes cp's last progress line counts.
func (r *run) progress() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.lines) - 1; i >= 0; i-- {
		if n, ok := cpBytes(r.lines[i].line); ok {
			return n
		}
	}
	return 0
}

func cpBytes(line string) (int64, bool) {
	m := cpLine.FindStringSubmatch(line)
	if m == nil {
		return 0, false
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	unit := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m[2]]
	return int64(v * unit), true
}

// longestStall is the longest time cp's progress lines went without
// counting more bytes, from the first byte to the last.
func (r *run) longestStall() (time.Duration, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last int64
	var lastAt, worstAt time.Time
	var worst time.Duration
	for _, l := range r.lines {
		n, ok := cpBytes(l.line)
		if !ok || n <= last {
			continue
		}
		if !lastAt.IsZero() && l.at.Sub(lastAt) > worst {
			worst, worstAt = l.at.Sub(lastAt), lastAt
		}
		last, lastAt = n, l.at
	}
	return worst, worstAt
}

// writeFast writes size random bytes to name.
func writeFast(t *testing.T, name string, size int64) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var seed [32]byte
	seed[0] = byte(time.Now().UnixNano())
	src := rand.NewChaCha8(seed)
	buf := make([]byte, 1<<20)
	for left := size; left > 0; left -= int64(len(buf)) {
		_, _ = src.Read(buf)
		if _, err := f.Write(buf[:min(left, int64(len(buf)))]); err != nil {
			t.Fatal(err)
		}
	}
}

func sum256(t *testing.T, name string) [32]byte {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	var s [32]byte
	h.Sum(s[:0])
	return s
}

// cp starts gridlink cp at a-n as alice (a proxy of the lab CA), with
// plain progress lines every 0.1 s and a JSON summary.
func (L *resumeLab) cp(t *testing.T, ctx context.Context, args ...string) *run {
	c, err := lab.OpenCA()
	if err != nil {
		t.Fatal(err)
	}
	cred, err := c.IssueProxy("alice")
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{L.bin, "cp", "--json", "--interval", "0.1", "--hub", lanHub(L.host("a-h1")), "--hub", lanHub(L.host("a-h2"))}
	argv = append(append(argv, cred.Args()...), args...)
	return startRun(t, ctx, L.an, "cp", argv...)
}

// copied checks a cp run's summary: it succeeded, in one attempt.
func copied(t *testing.T, r *run, err error) status.Copy {
	t.Helper()
	var s status.Copy
	if jerr := json.Unmarshal(r.out.Bytes(), &s); err != nil || jerr != nil || s.Failure != "" {
		t.Fatalf("cp: %v (%v): %s\n%s", err, jerr, r.out.Bytes(), r.stderr())
	}
	if s.Attempts != 1 {
		t.Errorf("cp took %d attempts, want 1 (the link resumes; cp does not retry)", s.Attempts)
	}
	return s
}

// perf starts a gridlink perf client at a-n named name (a node of the lab
// CA) sending to b-perf, with a JSON result.
func (L *resumeLab) perf(t *testing.T, ctx context.Context, name string, args ...string) *run {
	argv := append([]string{L.bin, "perf", "b-perf", "--json", "-i", "0.1"}, L.nodeArgs(L.an, name)...)
	return startRun(t, ctx, L.an, name, append(argv, args...)...)
}

// perfResult reads a perf run's JSON result.
func perfResult(t *testing.T, r *run) perf.Result {
	t.Helper()
	var p perf.Result
	if err := json.Unmarshal(r.out.Bytes(), &p); err != nil {
		t.Fatalf("perf: no JSON result (%v): %s\n%s", err, r.out.Bytes(), r.stderr())
	}
	return p
}

// kill ends hub name's process at once (SIGKILL), as a crash would.
func (L *resumeLab) kill(name string) time.Time {
	_ = syscall.Kill(-L.hubs[name].cmd.Process.Pid, syscall.SIGKILL)
	return time.Now()
}

// circuits is the number of circuits open through the hub in h (over its
// links to other hubs and to nodes), counted once per circuit end.
func (L *resumeLab) circuits(t *testing.T, h *topology.Host) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, errb, err := tryIn(ctx, h, nil, L.bin, "status", "--hub", "--json")
	var st status.Hub
	if err != nil || json.Unmarshal(out, &st) != nil {
		t.Fatalf("status --hub on %s: %v: %s %s", h.ID(), err, out, errb)
	}
	n := 0
	for _, l := range st.Links {
		n += l.Circuits
	}
	return n
}
