package agent

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/vconn"
)

func startAgent(t *testing.T, name, hubAddr string) (*Agent, *control.Client) {
	t.Helper()
	sock := fmt.Sprintf("@gridlink-test-%d-%s", os.Getpid(), name)
	a, err := Start(context.Background(), Config{Control: sock, Node: vconn.Config{Name: name, Hubs: []string{hubAddr}, ListenAddr: "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, control.Dial(sock)
}

// Two agents on one hub: the control API pings, diagnoses and measures
// through real connections.
func TestControlAPI(t *testing.T) {
	hub := startHub(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, ca := startAgent(t, "alpha", hub)
	startAgent(t, "beta", hub)

	st, err := ca.Status(ctx)
	if err != nil || st.Node.Name != "alpha" || st.Node.HubName != "site" {
		t.Fatalf("status: %+v, %v", st, err)
	}
	res, err := ca.Ping(ctx, control.PingRequest{Addr: "beta", Dials: 3, Count: 2})
	if err != nil || res.Error != "" {
		t.Fatalf("ping: %+v, %v", res, err)
	}
	if res.Method != "direct" || len(res.SetupMS) != 3 || len(res.RTTMS) != 6 || len(res.Spare) != 3 || res.Peer != "beta:7" {
		t.Errorf("ping result %+v", res)
	}
	bad, err := ca.Ping(ctx, control.PingRequest{Addr: "beta:4444", Dials: 1})
	if err != nil || !strings.Contains(bad.Error, "no listener on port 4444 at beta") {
		t.Errorf("ping to a closed port: %+v, %v", bad, err)
	}
	d, err := ca.Doctor(ctx, "beta")
	if err != nil || d.Target == nil || !strings.Contains(d.Verdict, "reached by direct") {
		t.Fatalf("doctor: %+v, %v", d, err)
	}
	for _, m := range d.Methods { // on loopback every method works, splicing too
		if !m.OK {
			t.Errorf("doctor: %s ok=%v (%s)", m.Method, m.OK, m.Why)
		}
	}
	if len(d.Methods) != 4 {
		t.Errorf("doctor tried %d methods, want 4", len(d.Methods))
	}
	p, err := ca.Perf(ctx, control.PerfRequest{Addr: "beta", Seconds: 0.3})
	if err != nil || p.Error != "" || p.Bytes <= 0 || p.MbitPerS <= 0 || p.Method != "direct" {
		t.Errorf("perf: %+v, %v", p, err)
	}
	if _, err := control.Dial("@gridlink-test-nobody").Status(ctx); err != control.ErrNoAgent {
		t.Errorf("status without an agent: %v, want ErrNoAgent", err)
	}
}

// A node whose first hub does not answer attaches to its second, and its
// status says so: hub 2 of 2, away from its first, which it probes.
func TestStatusAwayFromHome(t *testing.T) {
	second := startNamedHub(t, "second")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	first := dead.Addr().String()
	dead.Close() // nothing answers there: connection refused

	sock := fmt.Sprintf("@gridlink-test-%d-away", os.Getpid())
	a, err := Start(context.Background(), Config{Control: sock, Node: vconn.Config{Name: "away", Hubs: []string{first, second}, ListenAddr: "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	st, err := control.Dial(sock).Status(ctx)
	if err != nil || st.Node.HubName != "second" {
		t.Fatalf("status: %+v, %v", st, err)
	}
	if st.HubChoice != 2 || st.Hubs != 2 || st.NoReturn {
		t.Errorf("status says hub %d of %d, no return %v; want 2 of 2, returning", st.HubChoice, st.Hubs, st.NoReturn)
	}
	if w := st.HubWords(); !strings.Contains(w, "second") || !strings.Contains(w, "away from its first, which it probes to return to") {
		t.Errorf("hub words %q", w)
	}
}
