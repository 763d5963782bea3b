package lab_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vip"
)

// The virtual network's names on the wan lab (issue 19): host a runs a
// hub and node na with its name server, the namespace's resolver pointed
// at it (/etc/netns/NS/resolv.conf); host b runs node nb, which holds
// virtual addresses. glibc's resolver inside a's namespace (getent, as
// ssh and mount resolve) finds nb.grid at nb's addresses; an unknown name
// is not found. Each node is a process of its own inside its host's
// namespace (this test binary, re-executed through "ip netns exec").
func TestVipNames(t *testing.T) {
	topo := labtest.Up(t, "wan", map[string]string{"rtt": "2ms", "rate": "0"})
	a, b := labtest.Host(t, topo, "a"), labtest.Host(t, topo, "b")
	hubAddr := netip.AddrPortFrom(a.Ifaces[0].Addr, 7946).String()
	nsA := lab.HostNS(a)
	ready := startVipHelper(t, nsA, "a", hubAddr)
	if ready != "" {
		t.Fatalf("node a: %q", ready)
	}
	got := startVipHelper(t, lab.HostNS(b), "b", hubAddr)
	f := strings.Fields(got)
	if len(f) != 2 {
		t.Fatalf("node b said %q", got)
	}
	v4, err4 := netip.ParseAddr(f[0])
	v6, err6 := netip.ParseAddr(f[1])
	if err4 != nil || err6 != nil {
		t.Fatalf("node b said %q: %v %v", got, err4, err6)
	}

	getent := func(args ...string) (string, int) {
		out, err := exec.Command("ip", append([]string{"netns", "exec", nsA, "getent"}, args...)...).Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	for _, c := range []struct {
		db, name string
		want     netip.Addr
	}{
		// getaddrinfo's AI_ADDRCONFIG (getent ahosts*) hides AAAA
		// answers on a host without an IPv6 address of its own, as a's
		// namespace is (no TUN here): hosts asks gethostbyname2 for
		// AF_INET6 first, which does not.
		{"ahostsv4", "nb.grid", v4}, {"hosts", "nb.grid", v6}, {"ahostsv4", "NB.Grid", v4},
	} {
		out, code := getent(c.db, c.name)
		if code != 0 || !strings.HasPrefix(out, c.want.String()+" ") {
			t.Errorf("getent %s %s in %s: exit %d\n%s\nwant %s", c.db, c.name, nsA, code, out, c.want)
		}
	}
	if out, code := getent("hosts", "nobody.grid"); code != 2 {
		t.Errorf("getent hosts nobody.grid: exit %d (want 2, not found)\n%s", code, out)
	}
	if out, code := getent("hosts", v4.String()); code != 0 || !strings.Contains(out, "nb.grid") {
		t.Errorf("getent hosts %s (reverse): exit %d\n%s", v4, code, out)
	}
}

// startVipHelper runs this test binary as TestVipNamesHelper in namespace
// ns with role and the hub's address, until the test ends; it returns
// what the helper said when ready.
func startVipHelper(t *testing.T, ns, role, hubAddr string) string {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestVipNamesHelper$")
	cmd.Env = append(os.Environ(), "GRIDLINK_VIPDNS_HELPER="+role, "GRIDLINK_VIPDNS_HUB="+hubAddr, "GRIDLINK_VIPDNS_NS="+ns)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	t.Cleanup(func() {
		stdin.Close() // the helper stops and undoes what it did
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("helper %s: %v", role, err)
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Errorf("helper %s did not stop", role)
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "VIPDNS-READY"); ok {
				lines <- strings.TrimSpace(rest)
			} else {
				fmt.Fprintf(os.Stderr, "helper %s: %s\n", role, sc.Text())
			}
		}
		io.Copy(io.Discard, stdout)
		close(lines)
		done <- cmd.Wait()
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("helper %s in %s stopped before it was ready", role, ns)
		}
		return l
	case <-time.After(60 * time.Second):
		t.Fatalf("helper %s in %s not ready", role, ns)
	}
	return ""
}

// TestVipNamesHelper is TestVipNames's node process: role a serves the
// hub, node na and its name server, and points the namespace's resolver
// at it; role b attaches node nb and claims its virtual addresses. Each
// says VIPDNS-READY and runs until its stdin closes.
func TestVipNamesHelper(t *testing.T) {
	role := os.Getenv("GRIDLINK_VIPDNS_HELPER")
	if role == "" {
		t.Skip("run by TestVipNames")
	}
	hubAddr, ns := os.Getenv("GRIDLINK_VIPDNS_HUB"), os.Getenv("GRIDLINK_VIPDNS_NS")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	switch role {
	case "a":
		h, err := gridlink.NewHub(gridlink.HubConfig{Name: "site-a", Listen: hubAddr})
		if err != nil {
			t.Fatal(err)
		}
		hctx, stop := context.WithCancel(ctx)
		served := make(chan error, 1)
		go func() { served <- h.Serve(hctx) }()
		defer func() { stop(); <-served }()
		n, err := gridlink.StartAttached(ctx, gridlink.Config{Name: "na", Hubs: []string{hubAddr}})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		names, err := n.ServeNames(gridlink.DefaultNameServer, gridlink.NameOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer names.Close()
		res, err := gridlink.ConfigureResolver(ctx, gridlink.ResolverOptions{Server: names.Addr(), Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := res.Close(); err != nil {
				t.Error(err)
			}
		}()
		fmt.Println("VIPDNS-READY")
	case "b":
		k, err := identity.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		cr, err := pki.NewCredentials(k)
		if err != nil {
			t.Fatal(err)
		}
		s, err := hub.Attach(ctx, hub.SessionConfig{Creds: cr, Machine: identity.Machine{Name: "nb"}, Hubs: []string{hubAddr}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		v4, v6, err := vip.Addrs(vip.DefaultPrefix4, vip.DefaultPrefix6, k.ID(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ClaimAddrs(ctx, v4, v6); err != nil {
			t.Fatal(err)
		}
		fmt.Println("VIPDNS-READY", v4, v6)
	}
	io.Copy(io.Discard, os.Stdin)
}
