package lab_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// Issue 22 in grid6: a real browser (Debian's chromium, headless, driven
// by chromedp) on desktop-pc, where a hub and the user's agent run, opens
// `gridlink dashboard` there (which reads all six hubs' status sockets):
// all six hubs and their links appear on the map; a third-party transfer
// started from the page (rockstar-n1's service pushing to das3d-n1's, as
// alice by delegation) completes with its progress shown; a second is
// paused (the source holds its blocks: nothing is stored meanwhile),
// resumed and cancelled; a third, started while the second is paused,
// completes (each transfer's node has an identity of its own). Each view's screenshot goes to
// $GRIDLINK_SCREENSHOTS (docs/ when set to it; a temporary directory
// otherwise).
func TestGrid6Dashboard(t *testing.T) {
	chromium := chromiumBin(t)
	bin := gridlinkBin(t)
	topo := labtest.Up(t, "grid6", nil)
	began := time.Now()
	defer func() { t.Logf("the test ran %v after the lab was up", time.Since(began).Round(time.Second)) }()
	socks := t.TempDir()
	hubSock := func(site string) string { return filepath.Join(socks, site+".sock") }
	o, err := matrix.StartOverlayWith(context.Background(), topo, bin, matrix.Options{HubControl: hubSock})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Stop()
	x := &xferLab{t: t, topo: topo, bin: bin, o: o}
	rootR, rootD := openDir(t), openDir(t)
	x.serve("rockstar-n1", rootR, false)
	x.serve("das3d-n1", rootD, false, "--allow", "alice")
	writeRandom(t, filepath.Join(rootR, "one"), 12<<20)
	writeRandom(t, filepath.Join(rootR, "two"), 24<<20)

	pc := labtest.Host(t, topo, "desktop-pc")
	url := startDashboard(t, x, pc, topo, hubSock)
	shots := os.Getenv("GRIDLINK_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}

	ctx, cancel := browser(t, chromium, pc)
	defer cancel()
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		actx, acancel := context.WithTimeout(ctx, 90*time.Second)
		defer acancel()
		if err := chromedp.Do(actx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(what, expr string) any {
		t.Helper()
		actx, acancel := context.WithTimeout(ctx, 30*time.Second)
		defer acancel()
		v, err := chromedp.Run(actx, chromedp.Evaluate[any](expr))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
	shot := func(name string) {
		t.Helper()
		time.Sleep(300 * time.Millisecond) // the newest state drawn
		actx, acancel := context.WithTimeout(ctx, 30*time.Second)
		defer acancel()
		png, err := chromedp.Run(actx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, "dashboard-"+name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// count is how many elements sel matches now.
	count := func(sel string) int {
		return int(eval("count "+sel, fmt.Sprintf("document.querySelectorAll(%q).length", sel)).(float64))
	}
	// waitJS waits until the expression is true.
	waitJS := func(what, expr string) {
		t.Helper()
		actx, acancel := context.WithTimeout(ctx, 90*time.Second)
		defer acancel()
		if _, err := chromedp.Run(actx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(80*time.Second))); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	click := func(what, sel string) { t.Helper(); do(what, chromedp.Click(chromedp.CSS(sel))) }

	do("open the dashboard", chromedp.EmulateViewport(1100, 900), chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#map")))
	// the overlay: six hubs, every one linked (each hub's links are read
	// from its own status socket), round trips shown
	waitJS("six hubs, all reachable, each with a link", `(() => {
		const hubs = [...document.querySelectorAll("#map g.hub")];
		if (hubs.length != 6 || hubs.some(h => h.classList.contains("unreached"))) return false;
		const linked = new Set();
		document.querySelectorAll("#map g.link-group").forEach(g => { linked.add(g.dataset.a); linked.add(g.dataset.b); });
		return hubs.every(h => linked.has(h.dataset.hub));
	})()`)
	hubs := eval("hub names", `[...document.querySelectorAll("#map g.hub")].map(h => h.dataset.hub).sort().join(" ")`).(string)
	if hubs != "das3d das3v desktop g5k hiroshi rockstar" {
		t.Errorf("hubs on the map: %v", hubs)
	}
	links := count("#map g.link-group")
	t.Logf("the map: hubs %s, %d links", hubs, links)
	if links < 5 {
		t.Errorf("%d links on the map; want every hub linked", links)
	}
	if rtt := eval("a link's round trip", `document.querySelector("#links tbody tr td.num").textContent`).(string); !strings.HasSuffix(rtt, " ms") {
		t.Errorf("a link's round trip reads %q", rtt)
	}
	if n := count(`#map g.node.self`); n != 1 {
		t.Errorf("%d nodes marked as the user's; want desktop-pc's", n)
	}
	shot("overlay")

	// connections: a flow through the agent, its throughput graphed
	flow := exec.Command("ip", "netns", "exec", lab.HostNS(pc), "sh", "-c", "cat /dev/zero | "+bin+" nc das3v-n1:7 >/dev/null")
	flow.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := flow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-flow.Process.Pid, syscall.SIGKILL); _ = flow.Wait() }()
	click("connections view", "#tab-conns")
	waitJS("the flow's connection with its throughput", `[...document.querySelectorAll("#conns tbody tr")].some(r => r.dataset.remote.startsWith("das3v-n1:") && !r.lastChild.textContent.startsWith("–"))`)
	time.Sleep(3 * time.Second) // a few seconds of graph for the picture
	shot("connections")
	_ = syscall.Kill(-flow.Process.Pid, syscall.SIGKILL)
	click("virtual network view", "#tab-vip")
	shot("vip")

	// a third-party transfer from the page, its progress shown, done
	click("transfers view", "#tab-transfers")
	last := ""
	start := func(src, dst, limit string) string {
		t.Helper()
		do("start "+src, chromedp.SetValue(chromedp.CSS("#srcs"), src), chromedp.SetValue(chromedp.CSS("#dst"), dst),
			chromedp.SetValue(chromedp.CSS("#limit"), limit), chromedp.Click(chromedp.CSS("#start-button")))
		waitJS("the transfer's number", fmt.Sprintf(`(id => id != undefined && id != %q)(document.querySelector("#start-result").dataset.id)`, last))
		last = eval("its number", `document.querySelector("#start-result").dataset.id`).(string)
		return last
	}
	row := func(id string) string {
		return fmt.Sprintf(`document.querySelector('#transfers tr[data-id="%s"]')`, id)
	}
	id1 := start("xfer-rockstar-n1:one", "xfer-das3d-n1:one", strconv.Itoa(6<<20))
	waitJS("transfer 1 under way, its progress shown", fmt.Sprintf(`(r => r && r.dataset.state == "running" && +r.dataset.bytes > 0 && +r.dataset.bytes < +r.dataset.total && r.querySelector("progress").value > 0)(%s)`, row(id1)))
	shot("transfers")
	waitJS("transfer 1 done", fmt.Sprintf(`(r => r && r.dataset.state == "done" && r.dataset.bytes == r.dataset.total && r.querySelector("progress").value == r.querySelector("progress").max)(%s)`, row(id1)))
	sameBytes(t, filepath.Join(rootR, "one"), filepath.Join(rootD, "one"))

	// a second: paused, resumed, cancelled
	id2 := start("xfer-rockstar-n1:two", "xfer-das3d-n1:two", strconv.Itoa(2<<20))
	waitJS("transfer 2 under way", fmt.Sprintf(`(r => r && r.dataset.state == "running" && +r.dataset.bytes > 0)(%s)`, row(id2)))
	click("pause 2", fmt.Sprintf(`#transfers tr[data-id="%s"] button.pause`, id2))
	waitJS("transfer 2 paused", fmt.Sprintf(`(r => r && r.dataset.state == "paused")(%s)`, row(id2)))
	// the source holds: what the destination has stops growing; a held
	// push never stores its file
	part := filepath.Join(rootD, ".two.gridlink-part")
	held := waitSteady(t, part)
	if _, err := os.Stat(filepath.Join(rootD, "two")); err == nil {
		t.Errorf("the paused transfer stored its file")
	}
	shot("paused")
	// a third while the second is paused: each transfer's node has an
	// identity of its own (a proxy of alice's, issue 33), so the hub
	// admits both at once
	id3 := start("xfer-rockstar-n1:one", "xfer-das3d-n1:three", "0")
	waitJS("transfer 3 done beside the paused one", fmt.Sprintf(`(r => r && (r.dataset.state == "done" || r.dataset.state == "failed"))(%s)`, row(id3)))
	if st := eval("transfer 3's state", row(id3)+`.dataset.state`).(string); st != "done" {
		t.Fatalf("transfer 3, started while transfer 2 was paused: %s: %v", st, eval("its error", row(id3)+`.textContent`))
	}
	sameBytes(t, filepath.Join(rootR, "one"), filepath.Join(rootD, "three"))
	click("resume 2", fmt.Sprintf(`#transfers tr[data-id="%s"] button.resume`, id2))
	waitJS("transfer 2 running again", fmt.Sprintf(`(r => r && r.dataset.state == "running")(%s)`, row(id2)))
	testWaitGrow(t, part, held)
	click("select 2", fmt.Sprintf(`#transfers tr[data-id="%s"] input[type=checkbox]`, id2))
	click("cancel the selected", "#cancel-selected")
	waitJS("transfer 2 cancelled", fmt.Sprintf(`(r => r && r.dataset.state == "canceled")(%s)`, row(id2)))
	if _, err := os.Stat(filepath.Join(rootD, "two")); err == nil {
		t.Errorf("the cancelled transfer stored its file")
	}
	if n := count(`#transfers tbody tr`); n != 3 {
		t.Errorf("%d transfers in the history; want 3", n)
	}
}

// waitSteady waits until name's size stays the same for 2 s (the held
// sender's last block written), within 30 s, and returns it.
func waitSteady(t *testing.T, name string) int64 {
	t.Helper()
	last, since := int64(-1), time.Now()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		fi, err := os.Stat(name)
		if err != nil {
			continue
		}
		if fi.Size() != last {
			last, since = fi.Size(), time.Now()
		} else if time.Since(since) > 2*time.Second {
			return last
		}
	}
	t.Fatalf("%s kept changing for 30 s after the pause (%d bytes)", name, last)
	return 0
}

// testWaitGrow waits until name is larger than size (or gone: stored
// under its own name), within 60 s.
func testWaitGrow(t *testing.T, name string, size int64) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if fi, err := os.Stat(name); err != nil || fi.Size() > size {
			return
		}
	}
	t.Fatalf("%s did not grow past %d bytes after the resume", name, size)
}

// startDashboard runs `gridlink dashboard` on h as alice (a proxy of the
// lab CA, which pushes delegate), reading every hub's status socket, and
// returns the address it prints.
func startDashboard(t *testing.T, x *xferLab, h *topology.Host, topo *topology.Topology, hubSock func(string) string) string {
	t.Helper()
	cred, err := x.o.IssueUser("alice")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"netns", "exec", lab.HostNS(h), x.bin, "dashboard", "--no-browser", "--hub", matrix.HubAddr(h), "--interval", "500ms"}
	for _, s := range topo.Sites {
		args = append(args, "--hub-status", hubSock(s.Name))
	}
	args = append(args, cred.Args()...)
	cmd := exec.Command("ip", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "dashboard.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("dashboard:\n%s", b)
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("gridlink dashboard: %v\n%s", err, b)
	}
	return strings.TrimSpace(strings.TrimPrefix(line, "gridlink dashboard: "))
}

// chromiumBin is Debian's chromium (make deps installs it; a plain go
// test installs it here).
func chromiumBin(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	labtest.RequireRoot(t)
	install := func() error {
		cmd := exec.Command("apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium", "fonts-dejavu-core")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	if err := install(); err != nil {
		if out, err := exec.Command("apt-get", "update", "-qq").CombinedOutput(); err != nil {
			t.Fatalf("apt-get update: %v: %s", err, out)
		}
		if err := install(); err != nil {
			t.Fatalf("installing chromium: %v", err)
		}
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// browser starts chromium headless in host h's namespace (so that its
// loopback is the dashboard's), driven over a pipe (chromedp's
// --remote-debugging-pipe: no socket to reach across namespaces), and
// returns a chromedp context on it.
func browser(t *testing.T, chromium string, h *topology.Host) (context.Context, context.CancelFunc) {
	t.Helper()
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Fatal(err)
	}
	var log syncLog
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1100, 900), chromedp.Flag("hide-scrollbars", true), chromedp.CombinedOutput(&log),
		chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) {
			cmd.Args = append([]string{"ip", "netns", "exec", lab.HostNS(h), cmd.Path}, cmd.Args[1:]...)
			cmd.Path = ip
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		}))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	// the first Run starts the browser and opens the tab: on this
	// context, not one with a timeout, whose end would close them
	if _, err := chromedp.Run(ctx, chromedp.Func(func(context.Context, *chromedp.Target) error { return nil })); err != nil {
		cancel()
		acancel()
		t.Fatalf("starting chromium: %v\n%s", err, log.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chromium:\n%s", log.String())
		}
	})
	return ctx, func() { cancel(); acancel() }
}

// syncLog keeps a process's output for a failure report.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() < 1<<20 {
		l.b.Write(p)
	}
	return len(p), nil
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
