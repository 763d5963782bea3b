package lab_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/netns"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/nat"
)

func TestMain(m *testing.M) { labtest.Main(m) }

// readLine dials from host src to addr and returns the first line it reads.
func readLine(t *testing.T, src any, conn net.Conn) string {
	t.Helper()
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("%v: read: %v", src, err)
	}
	return strings.TrimSpace(line)
}

// The fidelity requirement: plain TCP connects exactly the 6 pairs of the
// paper's Table 3, and the others fail for the paper's reasons.
func TestGrid6PlainMatrix(t *testing.T) {
	topo := labtest.Up(t, "grid6", nil)
	m, err := matrix.Plain(context.Background(), topo, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ok []string
	for _, p := range m.Pairs {
		if p.Plain.OK {
			ok = append(ok, p.Src+"->"+p.Dst)
		} else if p.Plain.Error == "" {
			t.Errorf("%s->%s failed without an error", p.Src, p.Dst)
		}
		if (p.Src == "g5k" || p.Src == "hiroshi") && !strings.Contains(p.Plain.Error, "network is unreachable") {
			t.Errorf("%s->%s: a non-routed node should have no route: %q", p.Src, p.Dst, p.Plain.Error)
		}
	}
	sort.Strings(ok)
	want := []string{"das3d->das3v", "das3v->das3d", "desktop->das3d", "desktop->das3v", "rockstar->das3d", "rockstar->das3v"}
	if strings.Join(ok, " ") != strings.Join(want, " ") {
		t.Errorf("plain TCP connects %v\nwant exactly      %v", ok, want)
	}
	if m.Summary.Total != 30 || m.Summary.PlainOK != 6 {
		t.Errorf("summary %+v, want 30 pairs, 6 ok", m.Summary)
	}
	// setup time across the rockstar-das3v link (RTT 166 ms x 0.1).
	for _, p := range m.Pairs {
		// a TCP connect takes at least one RTT of the emulated link (its
		// accuracy is package wan's to test; here the machine may be loaded
		// by parallel test packages, so only the lower bound is firm).
		if p.Src == "rockstar" && p.Dst == "das3v" && (p.Plain.MS < 16.6 || p.Plain.MS > 500) {
			t.Errorf("rockstar->das3v setup %.1f ms, want at least one RTT of 16.6 ms", p.Plain.MS)
		}
	}
}

func TestGrid6Networks(t *testing.T) {
	topo := labtest.Up(t, "grid6", nil)
	host := func(name string) *labHost { return &labHost{t, labtest.Host(t, topo, name)} }

	// das3v and das3d share 10.1.0.0/24: das3v-n2's private address names
	// das3d-n2 when dialled from das3d.
	labtest.Listen(t, host("das3v-n2").h, ":7001", labtest.Greet("das3v-n2"))
	labtest.Listen(t, host("das3d-n2").h, ":7001", labtest.Greet("das3d-n2"))
	if got := host("das3d-n1").line("10.1.0.12:7001"); got != "das3d-n2" {
		t.Errorf("10.1.0.12 from das3d reached %q, want das3d-n2 (overlapping private ranges)", got)
	}
	// multi-homing: the fast cluster network of das3v.
	if got := host("das3v-n1").line("10.2.0.12:7001"); got != "das3v-n2" {
		t.Errorf("fast net: reached %q", got)
	}
	// non-routed g5k nodes reach their frontend's private address only.
	labtest.Listen(t, host("g5k-fe").h, ":7002", labtest.Greet("g5k-fe"))
	if got := host("g5k-n1").line("10.4.0.10:7002"); got != "g5k-fe" {
		t.Errorf("g5k node to frontend: %q", got)
	}
	host("das3v-n1").refused("198.51.100.106:7002", "i/o timeout") // g5k's firewall

	// hiroshi: only ssh (tcp/22) in, forwarded to the frontend; only tcp/22 out.
	// the lab's OpenSSH server on hiroshi-fe answers through the forward.
	labtest.Listen(t, host("hiroshi-fe").h, ":80", labtest.Greet("hiroshi-fe:80"))
	if got := host("das3v-n1").line("198.51.100.129:22"); !strings.HasPrefix(got, "SSH-2.0-OpenSSH") {
		t.Errorf("ssh port forward to hiroshi-fe: %q, want an OpenSSH banner", got)
	}
	host("das3v-n1").refused("198.51.100.129:80", "i/o timeout")
	labtest.Listen(t, host("das3v-fe").h, ":22", labtest.Greet("das3v-fe:22"))
	labtest.Listen(t, host("das3v-fe").h, ":80", labtest.Greet("das3v-fe:80"))
	if got := host("hiroshi-fe").line("198.51.100.10:22"); got != "das3v-fe:22" {
		t.Errorf("hiroshi out to tcp/22: %q", got)
	}
	host("hiroshi-fe").refused("198.51.100.10:80", "i/o timeout")
}

func (h *labHost) line(addr string) string {
	h.t.Helper()
	c, err := labtest.Dial(h.h, addr, "", 2*time.Second)
	if err != nil {
		h.t.Fatalf("%s -> %s: %v", h.h.ID(), addr, err)
	}
	return readLine(h.t, h.h.ID(), c)
}

func (h *labHost) refused(addr, why string) {
	h.t.Helper()
	c, err := labtest.Dial(h.h, addr, "", 500*time.Millisecond)
	if err == nil {
		c.Close()
		h.t.Errorf("%s -> %s connected; want %s", h.h.ID(), addr, why)
	} else if !strings.Contains(err.Error(), why) {
		h.t.Errorf("%s -> %s: %v; want %s", h.h.ID(), addr, err, why)
	}
}

// NAT behaviours as seen from a public server, and firewall kinds.
func TestNATZoo(t *testing.T) {
	topo := labtest.Up(t, "nat-zoo", nil)
	server := labtest.Host(t, topo, "public-server")
	for _, port := range []string{":80", ":443", ":7000"} {
		labtest.Listen(t, server, port, func(c net.Conn) { _, _ = c.Write([]byte(c.RemoteAddr().String() + "\n")) })
	}
	seen := func(from string, lport int) (string, int) {
		h := labtest.Host(t, topo, from)
		laddr := ""
		if lport > 0 {
			laddr = ":" + strconv.Itoa(lport)
		}
		c, err := labtest.Dial(h, "203.0.113.10:7000", laddr, 2*time.Second)
		if err != nil {
			t.Fatalf("%s -> server: %v", from, err)
		}
		host, port, _ := net.SplitHostPort(readLine(t, from, c))
		p, _ := strconv.Atoi(port)
		return host, p
	}
	if a, p := seen("preserve-h", 40001); a != "203.0.113.17" || p != 40001 {
		t.Errorf("preserve NAT mapped :40001 to %s:%d, want 203.0.113.17:40001", a, p)
	}
	var seq []int
	for i := 0; i < 4; i++ {
		a, p := seen("sequential-h", 40010+i*7)
		if a != "203.0.113.19" {
			t.Errorf("sequential NAT address %s", a)
		}
		seq = append(seq, p)
	}
	for i := 1; i < len(seq); i++ {
		if seq[i] != seq[i-1]+1 {
			t.Errorf("sequential NAT ports %v: want each one more than the last", seq)
			break
		}
	}
	var preserved, consecutive int
	last := -10
	for i := 0; i < 6; i++ {
		_, p := seen("random-h", 40100+i)
		if p == 40100+i {
			preserved++
		}
		if p == last+1 {
			consecutive++
		}
		last = p
	}
	if preserved > 1 || consecutive > 1 {
		t.Errorf("random NAT: %d of 6 ports preserved, %d consecutive", preserved, consecutive)
	}

	// inbound: dropped, rejected, or allowed out only to listed ports.
	for _, name := range []string{"fwdrop-h", "fwreject-h", "fwout-h"} {
		labtest.Listen(t, labtest.Host(t, topo, name), ":7000", labtest.Greet(name))
	}
	srv := &labHost{t, server}
	srv.refused("203.0.113.42:7000", "i/o timeout")        // fwdrop-h
	srv.refused("203.0.113.58:7000", "connection refused") // fwreject-h
	srv.refused("192.168.11.10:7000", "i/o timeout")       // private address behind a NAT: no route on the internet
	srv.refused("203.0.113.17:7000", "i/o timeout")        // a NAT's WAN address, no mapping
	fwout := &labHost{t, labtest.Host(t, topo, "fwout-h")}
	if got := fwout.line("203.0.113.10:443"); !strings.HasPrefix(got, "203.0.113.74:") {
		t.Errorf("fwout to tcp/443 seen as %q", got)
	}
	fwout.refused("203.0.113.10:80", "i/o timeout")
}

type labHost struct {
	t *testing.T
	h *topology.Host
}

// A crashed run (emulator killed) is detected, and the next up removes its
// leftovers; a lab whose owning test ended without taking it down is
// taken down by the next test's up (not by an up by hand, nor while its
// owner lives); down leaves no namespace, process or state behind.
func TestLeftoversAfterCrash(t *testing.T) {
	labtest.Up(t, "wan", nil)
	_, st, err := lab.Running()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(st.EmulatorPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		if _, _, err = lab.Running(); err != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err == nil || !strings.Contains(err.Error(), "is gone") {
		t.Fatalf("Running after the emulator died: %v; want it to say the emulator is gone", err)
	}
	topo, src, err := lab.Load("grid6", nil)
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	var log strings.Builder
	if err := lab.Up(topo, src, lab.Options{Executable: exe, Log: &log}); err != nil {
		t.Fatalf("up over leftovers: %v", err)
	}
	if !strings.Contains(log.String(), "removing leftovers") || !strings.Contains(log.String(), "gl-a-a") {
		t.Errorf("up did not report the leftovers it removed: %q", log.String())
	}
	if err := lab.Up(topo, src, lab.Options{Executable: exe}); !errors.Is(err, lab.ErrUp) {
		t.Errorf("second up while one runs: %v; want %v", err, lab.ErrUp)
	}

	// A lab whose owner ended without taking it down (a test killed on
	// its timeout) is taken down by the next Up with an owner; one
	// brought up by hand (no owner) is not, nor one whose owner lives.
	if _, err := lab.Down(); err != nil {
		t.Fatal(err)
	}
	owner := exec.Command("sleep", "60")
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	defer owner.Process.Kill()
	if err := lab.Up(topo, src, lab.Options{Executable: exe, Owner: owner.Process.Pid}); err != nil {
		t.Fatalf("up owned by process %d: %v", owner.Process.Pid, err)
	}
	if err := lab.Up(topo, src, lab.Options{Executable: exe, Owner: os.Getpid()}); !errors.Is(err, lab.ErrUp) {
		t.Errorf("up while the lab's owner lives: %v; want %v", err, lab.ErrUp)
	}
	_ = owner.Process.Kill()
	_ = owner.Wait()
	if err := lab.Up(topo, src, lab.Options{Executable: exe}); !errors.Is(err, lab.ErrUp) {
		t.Errorf("up by hand over a lab whose owner ended: %v; want %v", err, lab.ErrUp)
	}
	log.Reset()
	if err := lab.Up(topo, src, lab.Options{Executable: exe, Owner: os.Getpid(), Log: &log}); err != nil {
		t.Fatalf("up over a lab whose owner ended: %v", err)
	}
	if want := fmt.Sprintf("left up by process %d", owner.Process.Pid); !strings.Contains(log.String(), want) {
		t.Errorf("up did not say it took the lab down (%q): %q", want, log.String())
	}
	removed, err := lab.Down()
	if err != nil || len(removed) < 24 {
		t.Errorf("down removed %d things: %v", len(removed), err)
	}
	if left, _ := netns.List(lab.Prefix); len(left) > 0 {
		t.Errorf("namespaces left after down: %v", left)
	}
	if _, err := os.Stat(lab.StateDir + "/lab.json"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state left after down: %v", err)
	}
}

// Nodes find their site's hub by UDP multicast, which stays inside the
// site: a g5k compute node finds the hub on its frontend, not das3v's.
func TestHubDiscovery(t *testing.T) {
	topo := labtest.Up(t, "grid6", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, site := range []string{"g5k", "das3v"} {
		fe := labtest.Host(t, topo, site+"-fe")
		id := identity.KeyFromSeed(append([]byte(site), make([]byte, 32-len(site))...)).ID()
		var a *hubserver.Announcer
		err := netns.Do(lab.HostNS(fe), func() (err error) {
			a, err = hubserver.ListenDiscovery(site, id, 7946)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		go a.Serve(ctx)
	}
	var found []hubserver.Found
	err := netns.Do(lab.HostNS(labtest.Host(t, topo, "g5k-n1")), func() (err error) {
		found, err = hubserver.Discover(ctx, 500*time.Millisecond)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Name != "g5k" || found[0].Addr.String() != "10.4.0.10:7946" {
		t.Errorf("g5k-n1 discovered %+v, want only g5k's hub at 10.4.0.10:7946", found)
	}
}

// The NAT classifier on real NATs: observations recorded by a public host
// from connections out of each nat-zoo site classify as that site's NAT.
func TestNATClassification(t *testing.T) {
	topo := labtest.Up(t, "nat-zoo", nil)
	server := labtest.Host(t, topo, "public-server")
	labtest.Listen(t, server, ":7000", func(c net.Conn) { _, _ = c.Write([]byte(c.RemoteAddr().String() + "\n")) })
	for site, want := range map[string]nat.Allocation{"preserve": nat.Preserving, "sequential": nat.Sequential, "random": nat.Random} {
		h := labtest.Host(t, topo, site+"-h")
		var os []nat.Observation
		for i := 0; i < 8; i++ {
			local := netip.AddrPortFrom(h.Ifaces[0].Addr, uint16(41000+i*13))
			c, err := labtest.Dial(h, "203.0.113.10:7000", local.String(), 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			ext, err := netip.ParseAddrPort(readLine(t, site, c))
			if err != nil {
				t.Fatal(err)
			}
			os = append(os, nat.Observation{Local: local, External: ext, Observer: "public-server", At: time.Now()})
		}
		c := nat.Classify(os)
		if c.Allocation != want || c.External != h.Site.WAN {
			t.Errorf("%s NAT classified as %v from %v", site, c, os)
		}
		if want == nat.Sequential && c.Delta != 1 {
			t.Errorf("sequential NAT step %d, want 1", c.Delta)
		}
		t.Logf("%s: %v", site, c)
	}
}

// While a lab is up, the root namespace cannot send to lab addresses (they
// are routed to the machine's real network from there): a socket opened
// outside the namespace a test meant fails at once instead of leaking.
func TestRootGuard(t *testing.T) {
	labtest.Up(t, "wan", nil)
	if out, err := exec.Command("nft", "list", "table", "inet", lab.GuardTable).CombinedOutput(); err != nil {
		t.Fatalf("no guard table in the root namespace: %v\n%s", err, out)
	}
	start := time.Now()
	c, err := net.DialTimeout("tcp", "198.51.100.10:9", 3*time.Second)
	if err == nil {
		c.Close()
		t.Fatal("the root namespace reached a lab address")
	}
	if !errors.Is(err, syscall.EHOSTUNREACH) || time.Since(start) > time.Second {
		t.Errorf("dial from the root namespace: %v after %v, want an immediate EHOSTUNREACH", err, time.Since(start))
	}
}
