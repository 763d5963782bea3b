package metrics

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/status"
)

// An address without a host binds loopback; one with a host keeps it.
func TestAddr(t *testing.T) {
	for in, want := range map[string]string{
		":9466":          "127.0.0.1:9466",
		"9466":           "127.0.0.1:9466",
		"0.0.0.0:9466":   "0.0.0.0:9466",
		"[::1]:9466":     "[::1]:9466",
		"localhost:0":    "localhost:0",
		"10.1.2.3:http":  "10.1.2.3:http",
		"127.0.0.1:9466": "127.0.0.1:9466",
	} {
		if got, err := Addr(in); err != nil || got != want {
			t.Errorf("Addr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "host:", "no such port", "1.2.3.4:5:6"} {
		var ae *AddrError
		if got, err := Addr(bad); !errors.As(err, &ae) || ae.Addr != bad {
			t.Errorf("Addr(%q) = %q, %v; want an AddrError", bad, got, err)
		}
	}
}

// Listen on a host-less address serves on loopback, GET /metrics only.
func TestListenLoopback(t *testing.T) {
	s, err := Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ip := s.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		t.Fatalf("bound to %s; want loopback", ip)
	}
	if err := s.Serve(&Node{Counters: func() status.NodeCounters { return status.NodeCounters{} }}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + s.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "go_goroutines") {
		t.Errorf("GET /metrics: %s, %d bytes without go_goroutines", resp.Status, len(body))
	}
	resp, err = http.Post("http://"+s.Addr().String()+"/metrics", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %s; want 405", resp.Status)
	}
	// Close before Serve closes the listener.
	s2, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", s2.Addr().String()); err == nil {
		t.Error("an endpoint closed before it served still accepts")
	}
}

// The node collector turns counters into counters, gauges and a
// histogram whose buckets are the cumulative counts given.
func TestNodeCollector(t *testing.T) {
	c := status.NodeCounters{
		Paths:      []status.PathBytes{{Path: status.PathDirect, SentBytes: 10, ReceivedBytes: 20, Open: 2}, {Path: status.PathRouted, SentBytes: 5}},
		Setups:     []status.SetupCount{{Method: "direct", Outcome: status.SetupOK, Count: 3}, {Method: "routed", Outcome: status.SetupFailed, Count: 1}},
		SetupTimes: []status.Histogram{{Method: "direct", UpperS: []float64{0.01, 0.1}, Counts: []uint64{1, 2}, Count: 3, SumS: 1.5}},
	}
	n := &Node{Counters: func() status.NodeCounters { return c }, Attached: func() bool { return true },
		Virtual: func() status.PathBytes { return status.PathBytes{SentBytes: 99, Open: 3} }}
	want := `
# HELP gridlink_node_sent_bytes_total Payload bytes written to the node's virtual connections, by path kind (direct, reverse, splice, routed; virtual: the virtual network).
# TYPE gridlink_node_sent_bytes_total counter
gridlink_node_sent_bytes_total{path="direct"} 10
gridlink_node_sent_bytes_total{path="routed"} 5
gridlink_node_sent_bytes_total{path="virtual"} 99
# HELP gridlink_node_setup_duration_seconds How long the setups of the connections the node dialled took, by the method that made them.
# TYPE gridlink_node_setup_duration_seconds histogram
gridlink_node_setup_duration_seconds_bucket{method="direct",le="0.01"} 1
gridlink_node_setup_duration_seconds_bucket{method="direct",le="0.1"} 2
gridlink_node_setup_duration_seconds_bucket{method="direct",le="+Inf"} 3
gridlink_node_setup_duration_seconds_sum{method="direct"} 1.5
gridlink_node_setup_duration_seconds_count{method="direct"} 3
# HELP gridlink_node_connections Open virtual connections, by path kind.
# TYPE gridlink_node_connections gauge
gridlink_node_connections{path="direct"} 2
gridlink_node_connections{path="routed"} 0
gridlink_node_connections{path="virtual"} 3
# HELP gridlink_node_attached 1 while the node is attached to a hub, else 0.
# TYPE gridlink_node_attached gauge
gridlink_node_attached 1
`
	if err := testutil.CollectAndCompare(n, strings.NewReader(want), "gridlink_node_sent_bytes_total", "gridlink_node_setup_duration_seconds", "gridlink_node_connections", "gridlink_node_attached"); err != nil {
		t.Error(err)
	}
}

// The hub collector labels hub links and routes by hub name, never node
// links; a second link to the same hub does not break the scrape; every
// circuit counts once though both its ends are on the hub's links.
func TestHubCollector(t *testing.T) {
	h1 := identity.ID{1}
	st := status.Hub{Name: "a",
		Links: []status.Link{
			{Peer: h1, Name: "b", Role: "hub", RTTMS: 2, Circuits: 1},
			{Peer: h1, Name: "b", Role: "hub", RTTMS: 3}, // its replacement, both up for a moment
			{Peer: identity.ID{2}, Name: "secret-node", Role: "node", Circuits: 1},
		},
		Routes: []status.Route{{Hub: h1, Name: "b", Reachable: true, Hops: 1, LatencyMS: 2}, {Hub: identity.ID{3}, Name: "", Reachable: false}},
		Nodes:  []identity.Machine{{Name: "secret-node"}},
	}
	h := &Hub{Status: func() status.Hub { return st }, Counters: func() status.HubCounters {
		return status.HubCounters{SwitchedBytes: 7, Refusals: []status.Refusal{{What: "connection", Reason: status.RefusedRole, Count: 4}}}
	}}
	want := `
# HELP gridlink_hub_link_rtt_seconds Round trip of this hub's link to a neighbouring hub (0 until measured).
# TYPE gridlink_hub_link_rtt_seconds gauge
gridlink_hub_link_rtt_seconds{peer="b"} 0.002
# HELP gridlink_hub_circuits Circuits open through this hub.
# TYPE gridlink_hub_circuits gauge
gridlink_hub_circuits 1
# HELP gridlink_hub_route_up 1 while the route to a hub reaches it, else 0.
# TYPE gridlink_hub_route_up gauge
gridlink_hub_route_up{hub="0300000000"} 0
gridlink_hub_route_up{hub="b"} 1
# HELP gridlink_hub_refusals_total Connections and circuits this hub refused, by what and reason.
# TYPE gridlink_hub_refusals_total counter
gridlink_hub_refusals_total{reason="role",what="connection"} 4
`
	short := identity.ID{3}.Short()
	want = strings.Replace(want, "0300000000", short, 1)
	if err := testutil.CollectAndCompare(h, strings.NewReader(want), "gridlink_hub_link_rtt_seconds", "gridlink_hub_circuits", "gridlink_hub_route_up", "gridlink_hub_refusals_total"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(h)
	if err != nil || len(problems) != 0 {
		t.Errorf("lint: %v, %v", problems, err)
	}
	out, err := testutil.CollectAndFormat(h, expfmt.TypeTextPlain)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "secret-node") {
		t.Errorf("a node's name is a label:\n%s", out)
	}
}
