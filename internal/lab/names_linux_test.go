package lab_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/netns"
)

// Issue 36: a lab namespace asked the machine's name servers, which it
// cannot reach, so every lookup there waited twice 5 s (a GridFTP server
// in a frontend stalled on it). Every lab namespace now has, through
// /etc/netns, a hosts file with the lab's hosts by name and a
// resolv.conf without a name server: a lab host's name resolves to its
// lab address, an unknown name fails (at once: 127.0.0.1 is asked, where
// nothing listens), and down leaves nothing in /etc/netns.
func TestLabNames(t *testing.T) {
	topo := labtest.Up(t, "routed", nil)
	names, err := netns.List(lab.Prefix)
	if err != nil || len(names) == 0 {
		t.Fatalf("lab namespaces: %v %v", names, err)
	}
	for _, ns := range names {
		hosts, err := os.ReadFile(filepath.Join(lab.EtcNetns, ns, "hosts"))
		if err != nil {
			t.Errorf("%s: %v", ns, err)
			continue
		}
		for _, h := range lab.LabHosts(topo) {
			if line := h.Addr.String() + " " + h.Name + "\n"; !strings.Contains(string(hosts), line) {
				t.Errorf("%s's hosts file lacks %q:\n%s", ns, line, hosts)
			}
		}
		resolv, err := os.ReadFile(filepath.Join(lab.EtcNetns, ns, "resolv.conf"))
		if err != nil || strings.Contains(string(resolv), "nameserver") {
			t.Errorf("%s's resolv.conf names a server (or is missing: %v):\n%s", ns, err, resolv)
		}
	}

	fe := labtest.Host(t, topo, "a-fe")
	other := labtest.Host(t, topo, "b-fe")
	getent := func(name string) (string, time.Duration, error) {
		start := time.Now()
		out, err := exec.Command("ip", "netns", "exec", lab.HostNS(fe), "getent", "hosts", name).CombinedOutput()
		return string(out), time.Since(start), err
	}
	out, took, err := getent("b-fe")
	if fields := strings.Fields(out); err != nil || len(fields) < 2 || fields[0] != other.PrimaryAddr().String() || fields[1] != "b-fe" {
		t.Errorf("getent hosts b-fe in a-fe: %q %v, want %s b-fe", out, err, other.PrimaryAddr())
	}
	t.Logf("getent hosts b-fe in a-fe: %q in %v", strings.TrimSpace(out), took)
	out, took, err = getent("nosuch.example")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("getent hosts nosuch.example in a-fe: %q %v, want not found (exit status 2)", out, err)
	}
	t.Logf("getent hosts nosuch.example in a-fe: %v, in %v", err, took)

	if _, err := lab.Down(); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(lab.EtcNetns, lab.Prefix+"*")); len(left) > 0 {
		t.Errorf("left in %s after down: %v", lab.EtcNetns, left)
	}
}
