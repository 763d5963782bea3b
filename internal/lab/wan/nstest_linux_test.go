package wan

// Test scaffolding shared by the integration tests and the benchmarks: lab
// sites as network namespaces with a persistent TUN each, and traffic
// helpers that run as separate processes inside those namespaces (this test
// binary re-executed through "ip netns exec"), so the emulator under test
// has its process to itself, as in the lab.
//
// Safety: every address used is from 198.51.100.0/24 and lives only inside
// namespaces made here; nothing is assigned, routed or sent in the root
// namespace.

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const nsPrefix = "glt-wan-"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(runHelper(strings.Fields(h)))
	}
	os.Exit(m.Run())
}

// requireNetAdmin skips (or, under CI, fails) a test that needs root and
// the ip tool.
func requireNetAdmin(tb testing.TB) {
	tb.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root (network namespaces and TUN devices)"
	} else if _, err := exec.LookPath("ip"); err != nil {
		why = "needs the ip tool (iproute2)"
	} else if _, err := os.Stat("/dev/net/tun"); err != nil {
		why = "needs /dev/net/tun"
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		tb.Fatal(why)
	}
	tb.Skip(why)
}

var staleOnce sync.Once

// removeStaleNamespaces deletes glt-wan-<pid>-* namespaces whose creating
// process is gone (a test run that was killed before its cleanup).
func removeStaleNamespaces(tb testing.TB) {
	staleOnce.Do(func() {
		out, err := exec.Command("ip", "netns", "list").Output()
		if err != nil {
			tb.Logf("ip netns list: %v", err)
			return
		}
		for _, line := range strings.Split(string(out), "\n") {
			name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
			rest, ok := strings.CutPrefix(name, nsPrefix)
			if !ok {
				continue
			}
			pidStr, _, _ := strings.Cut(rest, "-")
			if pid, err := strconv.Atoi(pidStr); err == nil {
				if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
					continue // still running
				}
			}
			tb.Logf("removing stale namespace %s", name)
			exec.Command("ip", "-n", name, "link", "del", "wan0").Run()
			exec.Command("ip", "netns", "del", name).Run()
		}
	})
}

// site is a lab site for tests: a namespace with a persistent TUN wan0
// holding addr/32 and the default route.
type site struct {
	name string // short name, also the Port name
	ns   string // namespace name
	addr netip.Addr
}

func (s *site) path() string { return filepath.Join("/run/netns", s.ns) }

func (s *site) port() Port {
	return Port{Name: s.name, NetNS: s.path(), Dev: "wan0", Prefixes: []netip.Prefix{netip.PrefixFrom(s.addr, 32)}}
}

func run(tb testing.TB, args ...string) {
	tb.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		tb.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newSite creates a site namespace; the namespace and its TUN go away in
// tb's cleanup.
func newSite(tb testing.TB, name string, addr string) *site {
	tb.Helper()
	removeStaleNamespaces(tb)
	s := &site{name: name, ns: fmt.Sprintf("%s%d-%s", nsPrefix, os.Getpid(), name), addr: netip.MustParseAddr(addr)}
	exec.Command("ip", "netns", "del", s.ns).Run()
	run(tb, "ip", "netns", "add", s.ns)
	tb.Cleanup(func() {
		exec.Command("ip", "-n", s.ns, "link", "del", "wan0").Run()
		if out, err := exec.Command("ip", "netns", "del", s.ns).CombinedOutput(); err != nil {
			tb.Errorf("ip netns del %s: %v\n%s", s.ns, err, out)
		}
	})
	run(tb, "ip", "-n", s.ns, "link", "set", "lo", "up")
	run(tb, "ip", "-n", s.ns, "tuntap", "add", "dev", "wan0", "mode", "tun")
	run(tb, "ip", "-n", s.ns, "addr", "add", addr+"/32", "dev", "wan0")
	run(tb, "ip", "-n", s.ns, "link", "set", "wan0", "up")
	run(tb, "ip", "-n", s.ns, "route", "add", "default", "dev", "wan0")
	return s
}

// vethPair joins two fresh namespaces directly with a veth pair (no
// emulator), for baseline measurements.
func vethPair(tb testing.TB, a, b *site) {
	tb.Helper()
	run(tb, "ip", "-n", a.ns, "link", "add", "veth0", "type", "veth", "peer", "name", "veth0", "netns", b.ns)
	for _, s := range []*site{a, b} {
		peer := a
		if s == a {
			peer = b
		}
		run(tb, "ip", "-n", s.ns, "addr", "add", s.addr.String()+"/32", "dev", "veth0")
		run(tb, "ip", "-n", s.ns, "link", "set", "veth0", "up")
		run(tb, "ip", "-n", s.ns, "route", "add", peer.addr.String()+"/32", "dev", "veth0")
	}
}

// startEmulator starts an emulator over sites and closes it in cleanup
// (registered after the sites', so it runs before their removal).
func startEmulator(tb testing.TB, links []Link, sites ...*site) *Emulator {
	tb.Helper()
	cfg := Config{Links: links, Seed: 1}
	for _, s := range sites {
		cfg.Ports = append(cfg.Ports, s.port())
	}
	e, err := Start(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := e.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return e
}

// helper is a traffic helper process running inside a site's namespace.
type helper struct {
	cmd    *exec.Cmd
	out    *bufio.Scanner
	cancel context.CancelFunc
	stderr strings.Builder
}

// startHelper runs this test binary as helper args... inside s and waits
// for its first output line ("ready").
func startHelper(tb testing.TB, s *site, args ...string) *helper {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	h := &helper{cancel: cancel}
	h.cmd = exec.CommandContext(ctx, "ip", "netns", "exec", s.ns, exe, "-test.run=^$")
	h.cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join(args, " "))
	h.cmd.Stderr = &h.stderr
	// Die with the test process (ip execs the helper, which keeps this).
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		cancel()
		tb.Fatalf("start helper %v in %s: %v", args, s.ns, err)
	}
	tb.Cleanup(func() {
		cancel()
		h.cmd.Wait()
	})
	h.out = bufio.NewScanner(stdout)
	h.out.Buffer(make([]byte, 1<<20), 1<<20)
	if line, ok := h.line(); !ok || line != "ready" {
		tb.Fatalf("helper %v in %s: expected ready, got %q, stderr: %s", args, s.ns, line, h.stderr.String())
	}
	return h
}

func (h *helper) line() (string, bool) {
	if !h.out.Scan() {
		return "", false
	}
	return h.out.Text(), true
}

// result waits for the helper's result line and its exit.
func (h *helper) result(tb testing.TB) string {
	tb.Helper()
	line, ok := h.line()
	err := h.cmd.Wait()
	if !ok || err != nil {
		tb.Fatalf("helper %v: %v, stderr: %s", h.cmd.Args, err, h.stderr.String())
	}
	return line
}

// devDrops returns the TX and RX drop counters of wan0 in s: packets the
// kernel dropped at the device, e.g. because the emulator did not read
// them fast enough.
func (s *site) devDrops(tb testing.TB) (tx, rx uint64) {
	tb.Helper()
	read := func(name string) uint64 {
		out, err := exec.Command("ip", "netns", "exec", s.ns, "cat", "/sys/class/net/wan0/statistics/"+name).Output()
		if err != nil {
			tb.Logf("read %s of wan0 in %s: %v", name, s.ns, err)
			return 0
		}
		v, _ := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
		return v
	}
	return read("tx_dropped"), read("rx_dropped")
}
