package gridlink

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// An agent with AllowExit serves its exit service's counts on /metrics
// (every refusal reason, zero counts included), and one without serves
// none of them.
func TestExitMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := serveHub(t, HubConfig{Name: "xm"})
	for _, allow := range []bool{true, false} {
		cfg := AgentConfig{Node: Config{Name: fmt.Sprint("exit-metrics-", allow), Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1"},
			Control: fmt.Sprintf("@gridlink-exit-metrics-%t-%d", allow, os.Getpid()), Metrics: "127.0.0.1:0", AllowExit: allow}
		a, err := StartAgent(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		s := scrapeMetrics(t, a.MetricsAddr())
		s.lint(t, fmt.Sprintf("AllowExit %t", allow))
		series := []string{"gridlink_node_exits_opened_total", "gridlink_node_exits_failed_total",
			`gridlink_node_exits_refused_total{reason="loopback"}`, `gridlink_node_exits_refused_total{reason="per_member"}`,
			`gridlink_node_exit_bytes_total{direction="sent"}`, `gridlink_node_exit_bytes_total{direction="received"}`}
		for _, name := range series {
			if _, ok := s.samples[name]; ok != allow {
				t.Errorf("AllowExit %t: series %s there: %t", allow, name, ok)
			}
		}
	}
}
