package cli

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// metricsLine is what hub and node print when they serve metrics.
var metricsLine = regexp.MustCompile(`metrics on http://([^/]+)/metrics`)

// runServing runs the command line with args in a helper process until
// the test ends and returns where it serves metrics, read from its
// stderr.
func runServing(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCLIHelper$")
	cmd.Env = append(os.Environ(), cliHelperEnv+"="+strings.Join(args, "\n"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := metricsLine.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		close(found)
	}()
	select {
	case addr, ok := <-found:
		if !ok {
			t.Fatalf("gridlink %s ended without serving metrics", args[0])
		}
		go io.Copy(io.Discard, stderr)
		return addr
	case <-time.After(20 * time.Second):
		t.Fatalf("gridlink %s: no metrics line in 20s", args[0])
	}
	return ""
}

// `gridlink hub --metrics :0` serves /metrics on loopback. (A node's
// --metrics is the same flag into AgentConfig.Metrics, which the API's
// TestMetricsScrapedDuringTraffic scrapes: `gridlink node` has no flag to
// keep its direct listener on loopback, as tests in the root namespace
// must.)
func TestMetricsFlag(t *testing.T) {
	hubAddr := freeLoopbackPort(t)
	hm := runServing(t, "hub", "--name", "mh", "--listen", hubAddr, "--control", fmt.Sprintf("@gridlink-cli-metrics-%d", os.Getpid()), "--metrics", ":0")
	host, _, err := net.SplitHostPort(hm)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		t.Errorf("metrics on %s; want loopback for --metrics :0", hm)
	}
	resp, err := http.Get("http://" + hm + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), "\ngridlink_hub_nodes 0\n") {
		t.Errorf("the hub's metrics lack gridlink_hub_nodes 0:\n%s", b)
	}
	if c := Root(); c != nil {
		for _, name := range []string{"hub", "node"} {
			cmd, _, err := c.Find([]string{name})
			if err != nil {
				t.Fatal(err)
			}
			if f := cmd.Flags().Lookup("metrics"); f == nil || f.DefValue != "" {
				t.Errorf("gridlink %s: --metrics %+v; want a flag, off by default", name, f)
			}
		}
	}
}

// freeLoopbackPort is a loopback address with a port free a moment ago.
func freeLoopbackPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
