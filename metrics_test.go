package gridlink

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/gridlink/gridlink/agent"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/metrics"
	"github.com/gridlink/gridlink/vconn"
)

// scrape is one GET /metrics: the text and its samples by series, as
// the text format writes them (`name{label="value",...}`, labels in
// name order).
type scrape struct {
	text    []byte
	samples map[string]float64
}

func scrapeMetrics(t *testing.T, addr net.Addr) scrape {
	t.Helper()
	if addr == nil {
		t.Fatal("no metrics endpoint")
	}
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s, %v", resp.Status, err)
	}
	s := scrape{text: body, samples: map[string]float64{}}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		s.samples[line[:i]] = v
	}
	return s
}

// get is a series' value; a missing series fails the test.
func (s scrape) get(t *testing.T, series string) float64 {
	t.Helper()
	v, ok := s.samples[series]
	if !ok {
		t.Fatalf("no series %s in the scrape", series)
	}
	return v
}

// lint checks a scrape as `promtool check metrics` does (promlint, the
// linter promtool runs) and, where promtool is installed, with promtool
// itself; under CI=true a missing promtool fails (make deps installs
// Debian's prometheus package).
func (s scrape) lint(t *testing.T, what string) {
	t.Helper()
	problems, err := promlint.New(bytes.NewReader(s.text)).Lint()
	if err != nil {
		t.Fatalf("%s: the scrape does not parse: %v", what, err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s: %s", what, p.Metric, p.Text)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is missing (make deps installs Debian's prometheus package); CI=true: not skipped")
		}
		t.Logf("promtool not installed: checked with promlint only")
		return
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(s.text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: promtool check metrics: %v\n%s", what, err, out)
	}
}

// echoRound writes size bytes to c and reads them back from the echo
// service.
func echoRound(t *testing.T, c net.Conn, size int) {
	t.Helper()
	buf := bytes.Repeat([]byte("gridlink"), size/8)
	errc := make(chan error, 1)
	go func() { _, err := c.Write(buf); errc <- err }()
	if _, err := io.ReadFull(c, make([]byte, len(buf))); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// Metrics while traffic flows: two linked hubs and three nodes, each
// serving /metrics. An agent (x) dials another (y) directly; a node that
// may only route (r, at the other hub) dials y through both hubs. y's
// counters move on both path kinds, each dialler's setups count its
// method, both hubs count the routed bytes they switched; a transfer
// service counts a put and a get; every scrape passes promtool's
// checks, and the Grafana dashboard queries only what they hold.
func TestMetricsScrapedDuringTraffic(t *testing.T) {
	const size = 1 << 20
	h1 := serveHub(t, HubConfig{Name: "m1", Metrics: "127.0.0.1:0"})
	h2 := serveHub(t, HubConfig{Name: "m2", Metrics: "127.0.0.1:0", Peers: []string{h1.Addr().String()}})
	if a := h1.MetricsAddr().(*net.TCPAddr); !a.IP.IsLoopback() {
		t.Fatalf("hub metrics on %s", a)
	}
	testwait.Until(t, "the hubs to route to each other", 10*time.Second, func() bool {
		for _, r := range h2.Status().Routes {
			if r.Name == "m1" && r.Reachable {
				return true
			}
		}
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	startAgent := func(name string) *Agent {
		cfg := Config{Name: name, Hubs: []string{h1.Addr().String()}, ListenAddr: "127.0.0.1"}
		a, err := StartAgent(ctx, AgentConfig{Node: cfg, Control: fmt.Sprintf("@gridlink-metrics-test-%s-%d", name, os.Getpid()), Metrics: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		if err := a.Node().WaitAttached(ctx); err != nil {
			t.Fatal(err)
		}
		return a
	}
	y, x := startAgent("my"), startAgent("mx")
	r, err := vconn.Start(ctx, vconn.Config{Name: "mr", ListenAddr: "127.0.0.1", Hubs: []string{h2.Addr().String()}, Methods: []vconn.Method{vconn.Routed}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rm, err := metrics.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rm.Close()
	if err := rm.Serve(nodeMetrics(r)); err != nil {
		t.Fatal(err)
	}

	y0, h10, h20 := scrapeMetrics(t, y.MetricsAddr()), scrapeMetrics(t, h1.MetricsAddr()), scrapeMetrics(t, h2.MetricsAddr())
	echo := fmt.Sprintf("my:%d", agent.EchoPort)
	xc, err := x.Node().Dial(ctx, echo)
	if err != nil {
		t.Fatal(err)
	}
	defer xc.Close()
	rc, err := r.Dial(ctx, echo)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if m := rc.Method(); m != vconn.Routed {
		t.Fatalf("r's connection is %s; want routed", m)
	}
	echoRound(t, xc, size)
	echoRound(t, rc, size)

	ys, xs, rs := scrapeMetrics(t, y.MetricsAddr()), scrapeMetrics(t, x.MetricsAddr()), scrapeMetrics(t, rm.Addr())
	h1s, h2s := scrapeMetrics(t, h1.MetricsAddr()), scrapeMetrics(t, h2.MetricsAddr())
	moved := func(who string, before, after scrape, series string, least float64) {
		t.Helper()
		if d := after.get(t, series) - before.get(t, series); d < least {
			t.Errorf("%s: %s moved by %v; want at least %v", who, series, d, least)
		}
	}
	// y, the echo: both path kinds, both ways
	for _, path := range []string{"direct", "routed"} {
		moved("y", y0, ys, `gridlink_node_received_bytes_total{path="`+path+`"}`, size)
		moved("y", y0, ys, `gridlink_node_sent_bytes_total{path="`+path+`"}`, size)
		if v := ys.get(t, `gridlink_node_connections{path="`+path+`"}`); v < 1 {
			t.Errorf("y: %v open %s connections; want at least 1", v, path)
		}
	}
	for _, path := range []string{"reverse", "splice"} {
		if v := ys.get(t, `gridlink_node_received_bytes_total{path="`+path+`"}`); v != 0 {
			t.Errorf("y: %v bytes received on %s connections; want none", v, path)
		}
	}
	// the diallers: their setups by method
	if v := xs.get(t, `gridlink_node_setups_total{method="direct",outcome="ok"}`); v < 1 {
		t.Errorf("x: %v direct setups ok; want at least 1", v)
	}
	if v := xs.get(t, `gridlink_node_setup_duration_seconds_count{method="direct"}`); v < 1 {
		t.Errorf("x: %v direct setup times; want at least 1", v)
	}
	if v := xs.get(t, `gridlink_node_sent_bytes_total{path="direct"}`); v < size {
		t.Errorf("x: %v bytes sent directly; want at least %d", v, size)
	}
	if v := xs.get(t, `gridlink_node_attached`); v != 1 {
		t.Errorf("x: attached %v; want 1", v)
	}
	if v := rs.get(t, `gridlink_node_setups_total{method="routed",outcome="ok"}`); v < 1 {
		t.Errorf("r: %v routed setups ok; want at least 1", v)
	}
	if v := rs.get(t, `gridlink_node_setups_total{method="direct",outcome="ok"}`); v != 0 {
		t.Errorf("r, routed only: %v direct setups; want none", v)
	}
	if v := rs.get(t, `gridlink_node_setup_duration_seconds_count{method="routed"}`); v < 1 {
		t.Errorf("r: %v routed setup times; want at least 1", v)
	}
	if v := rs.get(t, `gridlink_node_received_bytes_total{path="routed"}`); v < size {
		t.Errorf("r: %v bytes received routed; want at least %d", v, size)
	}
	// the hubs: the routed bytes passed both, both ways
	moved("hub m1", h10, h1s, `gridlink_hub_switched_bytes_total`, 2*size)
	moved("hub m2", h20, h2s, `gridlink_hub_switched_bytes_total`, 2*size)
	moved("hub m1", h10, h1s, `gridlink_hub_circuits_opened_total`, 1)
	if v := h1s.get(t, `gridlink_hub_nodes`); v != 2 {
		t.Errorf("hub m1: %v nodes; want 2 (x and y)", v)
	}
	if v := h1s.get(t, `gridlink_hub_circuits`); v < 1 {
		t.Errorf("hub m1: %v circuits; want r's", v)
	}
	if v := h1s.get(t, `gridlink_hub_links{role="hub"}`); v != 1 {
		t.Errorf("hub m1: %v hub links; want 1", v)
	}
	if v := h2s.get(t, `gridlink_hub_route_up{hub="m1"}`); v != 1 {
		t.Errorf("hub m2: route to m1 up %v; want 1", v)
	}
	if v := h2s.get(t, `gridlink_hub_route_hops{hub="m1"}`); v != 1 {
		t.Errorf("hub m2: route to m1 of %v hops; want 1", v)
	}
	h2s.get(t, `gridlink_hub_link_rtt_seconds{peer="m1"}`)
	h2s.get(t, `gridlink_hub_refusals_total{reason="not-admitted",what="connection"}`)
	// a transfer service: a put and a get, counted when they end
	served, local := t.TempDir(), t.TempDir()
	scfg := Config{Name: "msrv", Hubs: []string{h1.Addr().String()}, ListenAddr: "127.0.0.1"}
	sn, err := Start(ctx, scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	svc, err := ServeTransfers(sn, scfg, ServeConfig{Root: served, Metrics: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	go svc.Serve(sctx)
	src := filepath.Join(local, "data")
	if err := os.WriteFile(src, bytes.Repeat([]byte("x"), size), 0o644); err != nil {
		t.Fatal(err)
	}
	cc := CopyConfig{Node: Config{Name: "mcp", Hubs: []string{h1.Addr().String()}, ListenAddr: "127.0.0.1"}}
	if _, err := Copy(ctx, cc, CopyPlan{Kind: CopyPut, Srcs: []string{src}, DstNode: "msrv", Dst: "in"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Copy(ctx, cc, CopyPlan{Kind: CopyGet, SrcNode: "msrv", Srcs: []string{"in"}, Dst: filepath.Join(local, "back")}); err != nil {
		t.Fatal(err)
	}
	// the service counts a session after its last message: the client
	// may have returned a moment before
	var ts scrape
	testwait.Until(t, "the service to count the put and the get", 10*time.Second, func() bool {
		ts = scrapeMetrics(t, svc.MetricsAddr())
		return ts.samples[`gridlink_transfer_sessions_total{op="put",outcome="ok"}`] == 1 && ts.samples[`gridlink_transfer_sessions_total{op="get",outcome="ok"}`] == 1
	})
	for _, op := range []string{"put", "get"} {
		if v := ts.get(t, `gridlink_transfer_sessions_total{op="`+op+`",outcome="ok"}`); v != 1 {
			t.Errorf("transfers: %v %s sessions ok; want 1", v, op)
		}
		if v := ts.get(t, `gridlink_transfer_files_total{op="`+op+`",outcome="ok"}`); v != 1 {
			t.Errorf("transfers: %v files by %s; want 1", v, op)
		}
		if v := ts.get(t, `gridlink_transfer_sent_bytes_total{op="`+op+`",outcome="ok"}`); v != size {
			t.Errorf("transfers: %v bytes sent by %s; want %d", v, op, size)
		}
	}
	for _, op := range []string{"put", "get"} {
		if v := ts.get(t, `gridlink_transfer_moved_bytes_total{op="`+op+`"}`); v != size {
			t.Errorf("transfers: %v bytes moved by %s; want %d", v, op, size)
		}
	}
	if v := ts.get(t, `gridlink_transfer_sessions_total{op="push",outcome="failed"}`); v != 0 {
		t.Errorf("transfers: %v failed pushes; want none", v)
	}
	ts.get(t, `gridlink_node_sent_bytes_total{path="direct"}`) // the service's node, too
	// no node's name or address as a label
	for _, s := range []scrape{ys, xs, rs, h1s, h2s, ts} {
		for _, word := range []string{"my", "mx", "mr", "mcp", "msrv", "127.0.0.1"} {
			for series := range s.samples {
				if strings.Contains(series, `"`+word+`"`) || strings.Contains(series, word+":") {
					t.Errorf("series %s names the node or address %s", series, word)
				}
			}
		}
	}
	// Go and process collectors
	ys.get(t, `go_goroutines`)
	ys.get(t, `process_resident_memory_bytes`)
	for what, s := range map[string]scrape{"node y": ys, "node x": xs, "node r": rs, "hub m1": h1s, "hub m2": h2s, "transfers": ts} {
		s.lint(t, what)
	}
	checkDashboard(t, "docs/grafana/gridlink.json", ys, h1s, ts)
}

// metricName finds the names a PromQL expression selects: the module's
// and the client library's prefixes, and any name before a selector.
var metricName = regexp.MustCompile(`\b(?:gridlink|go|process)_[a-z0-9_]+\b|\b[a-zA-Z_:][a-zA-Z0-9_:]*\{`)

// checkDashboard reads the Grafana dashboard file and checks that every
// metric its panels and variables query is in one of the scrapes, and
// that it shows every gridlink metric family they hold.
func checkDashboard(t *testing.T, file string, scrapes ...scrape) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	have, families := map[string]bool{}, map[string]bool{}
	for _, s := range scrapes {
		for series := range s.samples {
			name, _, _ := strings.Cut(series, "{")
			have[name] = true
		}
		sc := bufio.NewScanner(bytes.NewReader(s.text))
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 4 && f[1] == "TYPE" && strings.HasPrefix(f[2], "gridlink_") {
				families[f[2]] = true
			}
		}
	}
	queried := map[string]bool{}
	check := func(where, expr string) {
		names := metricName.FindAllString(expr, -1)
		if len(names) == 0 {
			t.Errorf("%s: %q queries no metric", where, expr)
		}
		for _, n := range names {
			n = strings.TrimSuffix(n, "{")
			queried[n] = true
			if !have[n] {
				t.Errorf("%s queries %s, which no scrape has", where, n)
			}
		}
	}
	exprs := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			check("panel "+strconv.Quote(p.Title), tg.Expr)
			exprs++
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			check("variable "+v.Name, v.Definition)
		}
	}
	if exprs == 0 {
		t.Fatalf("%s: no panel queries anything", file)
	}
	for f := range families {
		if !queried[f] && !queried[f+"_bucket"] {
			t.Errorf("%s shows no panel of %s", file, f)
		}
	}
}
