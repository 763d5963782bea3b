package lab_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/status"
)

// cpProgress: gridlink cp -r of a tree of 4 files in 5 directories, from
// west-n to pub-n's transfer service (routed, through both sites' hubs),
// rate-limited so that it prints several plain progress lines: each
// counts the 4 files, not the 9 entries, the last has all 4 done, and the
// first, drawn before there is a rate, does not say "0 B/s".
func (L *natHubs) cpProgress(t *testing.T) {
	pubN, westN := L.host("pub-n"), L.host("west-n")
	root := openDir(t)
	srv := startIn(t, pubN, "serve", append([]string{L.bin, "serve", "--name", "xfer-pub-n", "--hub", hubAddr(L.host("pub-hub2")), "--root", root},
		L.issue(ca.Node, "xfer-pub-n").Args()...)...)
	srv.waitLog(t, "serving", 20*time.Second)

	src := filepath.Join(t.TempDir(), "tree")
	for name, size := range map[string]int{"a/f1": 200 << 10, "a/b/f2": 300 << 10, "c/f3": 200 << 10, "top": 100 << 10} {
		writeRandom(t, filepath.Join(src, name), size)
	}
	if err := os.MkdirAll(filepath.Join(src, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	user, err := lab.OpenCA()
	if err != nil {
		t.Fatal(err)
	}
	cred, err := user.IssueProxy("alice")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	argv := append([]string{L.bin, "cp", "-r", "--json", "--interval", "0.25", "--limit", "256K", "--hub", hubAddr(L.host("west-hub"))}, cred.Args()...)
	out, errb, err := tryIn(ctx, westN, nil, append(argv, src, "xfer-pub-n:copy")...)
	var r status.Copy
	if jerr := json.Unmarshal(out, &r); err != nil || jerr != nil {
		t.Fatalf("cp -r west-n -> pub-n: %v (%v): %s\n%s", err, jerr, out, errb)
	}
	for _, name := range []string{"a/f1", "a/b/f2", "c/f3", "top"} {
		sameBytes(t, filepath.Join(src, name), filepath.Join(root, "copy", name))
	}
	if r.Files != 4 || r.Dirs != 5 {
		t.Errorf("cp --json: %d files, %d directories; want 4 and 5", r.Files, r.Dirs)
	}
	// "  0.3 s  total 64.0 KiB / 800.0 KiB, 0 / 4 files (2 directories), 200.0 KiB/s, ETA 4s"
	line := regexp.MustCompile(`^\s*[0-9.]+ s  total .*, ([0-9]+) / ([0-9]+) files[^,]*, ([^,]+), ETA `)
	var lines []string
	bad := 0
	for _, l := range strings.Split(string(errb), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		lines = append(lines, l)
		if len(lines) == 1 && strings.HasPrefix(m[3], "0 B/s") {
			t.Errorf("first progress line %q says 0 B/s before there is a rate", l)
		}
		if m[2] == "0" && strings.Contains(l, " / 0 B, ") {
			continue // before the plan (the connection is still being set up)
		}
		if done, _ := strconv.Atoi(m[1]); m[2] != "4" || done > 4 {
			if bad++; bad == 1 {
				t.Errorf("progress line %q: want N / 4 files (the tree has 4 files in 5 directories)", l)
			}
		}
	}
	if bad > 1 {
		t.Errorf("%d of %d progress lines count other than 4 files", bad, len(lines))
	}
	t.Logf("cp -r: %d files, %d directories, %.1f s, %s; %d progress lines, first and last:\n%s\n%s", r.Files, r.Dirs, r.Seconds, r.Method,
		len(lines), first(lines), last(lines))
	if len(lines) < 2 {
		t.Fatalf("cp printed %d progress lines, want several:\n%s", len(lines), errb)
	}
	if l := last(lines); !strings.Contains(l, " 4 / 4 files") {
		t.Errorf("last progress line %q: want 4 / 4 files", l)
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// echoStream writes a line every 50 ms to a node's built-in echo and
// counts what comes back: through gridlink nc fed from a pipe (so nc
// hands its ends to the agent), or a connection to gridlink forward.
type echoStream struct {
	name string
	w    io.WriteCloser
	mu   sync.Mutex
	got  int
	errb bytes.Buffer // nc's stderr
	done chan struct{}
	err  error
}

// run reads r until it ends (then wait says how), writing to s.w.
func (s *echoStream) run(r io.Reader, wait func() error) {
	s.done = make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			s.mu.Lock()
			s.got += n
			s.mu.Unlock()
			if err != nil {
				s.err = err
				break
			}
		}
		if wait != nil {
			s.err = wait()
		}
		close(s.done)
	}()
	go func() {
		for {
			select {
			case <-s.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := s.w.Write([]byte("tick\n")); err != nil {
				return
			}
		}
	}()
}

// nc streams from host to addr through gridlink nc.
func (L *natHubs) nc(t *testing.T, host, addr string) *echoStream {
	s := &echoStream{name: "nc " + host + " -> " + addr}
	cmd := exec.Command("ip", "netns", "exec", lab.HostNS(L.host(host)), L.bin, "nc", addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = &lockedWriter{mu: &s.mu, w: &s.errb}
	var err error
	if s.w, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.run(out, cmd.Wait)
	t.Cleanup(func() {
		s.w.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	})
	return s
}

// dial streams through a connection to addr (gridlink forward's port)
// made in host.
func (L *natHubs) dial(t *testing.T, host, addr, name string) *echoStream {
	c, err := labtest.Dial(L.host(host), addr, "", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s := &echoStream{name: name, w: c}
	s.run(c, nil)
	t.Cleanup(func() { c.Close(); <-s.done })
	return s
}

func (s *echoStream) received() (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got, s.errb.String()
}

// why is how the stream ended, nil while it runs.
func (s *echoStream) why() error {
	if !s.ended() {
		return nil
	}
	return s.err
}

func (s *echoStream) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// natStreams are the long-running streams of HubDeath.
type natStreams struct {
	forward *proc       // gridlink forward -v on east-n to west-n's echo
	routed  *echoStream // through it: east-n -> west-n, through east's hub
	other   *echoStream // nc pub-n -> west-n, through the public hubs only
}

const forwardPort = "127.0.0.1:7007"

// startStreams starts both streams and waits until each has echoed
// (started again while the name is not found yet: the hubs' routes are
// still settling).
func (L *natHubs) startStreams(t *testing.T) natStreams {
	echoed := func(start func() *echoStream) *echoStream {
		deadline := time.Now().Add(45 * time.Second)
		for {
			e := start()
			for !e.ended() && time.Now().Before(deadline) {
				if n, _ := e.received(); n > 0 {
					return e
				}
				time.Sleep(100 * time.Millisecond)
			}
			_, errs := e.received()
			if time.Now().After(deadline) {
				t.Fatalf("%s did not echo within 45 s: %v\n%s", e.name, e.why(), errs)
			}
			t.Logf("%s: %v: %s (again)", e.name, e.why(), strings.TrimSpace(errs))
			time.Sleep(time.Second)
		}
	}
	var s natStreams
	s.forward = startIn(t, L.host("east-n"), "forward", L.bin, "forward", "-v", forwardPort, "west-n:7")
	s.forward.waitLog(t, "gridlink forward: ", 10*time.Second)
	s.routed = echoed(func() *echoStream { return L.dial(t, "east-n", forwardPort, "forward east-n -> west-n:7") })
	s.other = echoed(func() *echoStream { return L.nc(t, "pub-n", "west-n:7") })
	return s
}

// eastWord matches east's hub named as itself (not east-n).
var eastWord = regexp.MustCompile(`(^|[^\w-])east([^\w-]|$)`)

// hubDeath kills east's hub under east-n's routed stream, which gridlink
// forward carries: forward logs its failure naming east's hub (the old
// code logged nothing: the stream's end gave no reason).
func (L *natHubs) hubDeath(t *testing.T, s natStreams) {
	if s.routed.ended() || s.other.ended() {
		t.Fatalf("a stream ended before east's hub was killed")
	}
	eastID := loadID(t, L.eastKey.Key)
	before := len(s.forward.output())
	hub := L.hubs["east"]
	_ = syscall.Kill(-hub.cmd.Process.Pid, syscall.SIGKILL)
	killed := time.Now()
	otherAt, _ := s.other.received()
	select {
	case <-s.routed.done:
	case <-time.After(20 * time.Second):
		t.Errorf("the forwarded stream east-n -> west-n:7 still runs 20 s after east's hub, which carried it, died")
	}
	n, _ := s.routed.received()
	named := func() string {
		for _, l := range strings.Split(s.forward.output()[before:], "\n") {
			if strings.Contains(l, "-> west-n:7: ") && (eastWord.MatchString(l) || strings.Contains(l, eastID.Short())) {
				return l
			}
		}
		return ""
	}
	for end := time.Now().Add(3 * time.Second); named() == "" && time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("forward east-n -> west-n:7 after east's hub died (%v): %v, %d bytes echoed; forward's log since:\n%s",
		time.Since(killed).Round(time.Millisecond), s.routed.why(), n, strings.TrimSpace(s.forward.output()[before:]))
	if named() == "" {
		t.Errorf("gridlink forward -v logged no failure of its stream naming east's hub (%s), which died", eastID.Short())
	}
	// the stream that does not pass east's hub carries on
	time.Sleep(time.Until(killed.Add(2 * time.Second)))
	if now, errs := s.other.received(); s.other.ended() || now <= otherAt {
		t.Errorf("nc pub-n -> west-n:7 (through the public hubs) stopped when east's hub died: %d then %d bytes, %v %q", otherAt, now, s.other.why(), errs)
	}
	// and east-n reaches west-n again, through hub1
	testwait.Until(t, "east-n to reach west-n through hub1", 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, _, _ := tryIn(ctx, L.host("east-n"), []byte("again\n"), L.bin, "nc", "west-n:7")
		return string(out) == "again\n"
	})
}

func loadID(t *testing.T, keyFile string) identity.ID {
	k, err := identity.LoadKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return k.ID()
}

// restartedHub restarts east's hub (killed by HubDeath) with a fresh key.
func (L *natHubs) restartedHub(t *testing.T) {
	oldID := loadID(t, L.eastKey.Key)
	fresh := L.issue(ca.Hub, "east")
	newID := loadID(t, fresh.Key)
	L.startHub(L.host("east-hub"), "east", fresh, L.host("pub-hub1"))
	others := []string{"pub-hub1", "pub-hub2", "west-hub"}
	for _, h := range others {
		testwait.Until(t, h+" to reach the restarted east", 30*time.Second, func() bool { return L.reachable(L.host(h), "east", newID) })
	}
	reached := time.Now()
	stale := func() []string {
		var rows []string
		for _, h := range others {
			rs, err := L.routes(L.host(h))
			if err != nil {
				rows = append(rows, err.Error())
			}
			for _, r := range rs {
				if r.Hub == oldID {
					rows = append(rows, fmt.Sprintf("%s: %s (%s) hops %d", h, r.Name, r.Hub.Short(), r.Hops))
				}
			}
		}
		return rows
	}
	// a route table is aged every second: give it a few
	var rows []string
	for time.Since(reached) < 4*time.Second {
		if rows = stale(); len(rows) == 0 {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(rows) > 0 {
		t.Errorf("%v after the restarted east (%s) is reachable, hubs still list its old identity %s: %s", time.Since(reached).Round(time.Second), newID.Short(), oldID.Short(), strings.Join(rows, "; "))
	} else {
		t.Logf("east restarted as %s (was %s): no hub lists the old identity", newID.Short(), oldID.Short())
	}
}
