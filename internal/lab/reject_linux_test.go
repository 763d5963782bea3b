package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/status"
)

// Issue 17, failure 1: two hubs, each behind a port-preserving NAT that
// answers a SYN matching no mapping with a reset, and a third, public hub.
// A splice whose first SYN reaches the other NAT before that NAT's own SYN
// has opened its mapping is reset; splicing must survive that. The NATed
// hubs get a spliced link (their status shows each other one hop away,
// not two through the public hub), and their nodes connect by splice, not
// routed.
//
// It runs at the topology's 0.2 ms round trip (most first SYNs reset) and
// at 10 ms (SYNs that cross in flight pass; the retries must not hurt).
func TestNATRejectSplice(t *testing.T) {
	bin := gridlinkBin(t)
	for _, rtt := range []string{"0.2ms", "10ms"} {
		t.Run("rtt="+rtt, func(t *testing.T) { natRejectSplice(t, bin, rtt) })
	}
}

func natRejectSplice(t *testing.T, bin, rtt string) {
	topo := labtest.Up(t, "nat-reject", map[string]string{"rtt": rtt})
	ctx := context.Background()
	host := func(name string) *labHost { return &labHost{t, labtest.Host(t, topo, name)} }
	// the situation: an unsolicited SYN to a NAT's WAN address is reset,
	// not dropped.
	labtest.Listen(t, labtest.Host(t, topo, "east-hub"), ":7001", labtest.Greet("east-hub"))
	host("public-n").refused("203.0.113.17:7001", "connection refused")
	host("public-n").refused("203.0.113.18:7001", "connection refused")

	o, err := matrix.StartOverlay(ctx, topo, bin)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Stop()
	east, west := labtest.Host(t, topo, "east-hub"), labtest.Host(t, topo, "west-hub")

	// (a) a spliced hub link: each NATed hub one hop from the other.
	deadline := time.Now().Add(60 * time.Second)
	for {
		he, errE := o.HubHops(ctx, east)
		hw, errW := o.HubHops(ctx, west)
		if errE == nil && errW == nil && he["west"] == 1 && hw["east"] == 1 {
			t.Logf("spliced hub link: east -> west %d hop, west -> east %d hop", he["west"], hw["east"])
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("no spliced hub link between east and west within 60s: east's routes %v (%v), west's %v (%v)\n--- east hub ---\n%s\n--- west hub ---\n%s",
				he, errE, hw, errW, tail(o.HubLog(east)), tail(o.HubLog(west)))
			break
		}
		time.Sleep(time.Second)
	}

	// (b) nodes at the two sites connect by splice, both ways, on (nearly)
	// every uncached attempt.
	const attempts = 6
	for _, pair := range [][2]string{{"east-n", "west-n"}, {"west-n", "east-n"}} {
		src, dst := labtest.Host(t, topo, pair[0]), labtest.Host(t, topo, pair[1])
		// attached and its NAT classified before measuring.
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
			if ok, _ := o.Reaches(ctx, src, labtest.Host(t, topo, "public-n")); ok {
				break
			}
		}
		time.Sleep(2 * time.Second)
		methods := map[string]int{}
		var errs []string
		for i := 0; i < attempts; i++ {
			out, err := o.Run(ctx, src, "ping", "--json", "--fresh", "--dials", "1", "--count", "1", dst.ID())
			var pr status.Ping
			if jerr := json.Unmarshal(out, &pr); jerr != nil || pr.Error != "" {
				errs = append(errs, fmt.Sprintf("%v %v %s", err, jerr, pr.Error))
				continue
			}
			methods[pr.Method]++
		}
		t.Logf("%s -> %s: %v, %d failed", pair[0], pair[1], methods, len(errs))
		if methods["splice"] < attempts-1 {
			t.Errorf("%s -> %s: spliced %d of %d uncached connections (%v; errors %v)\n--- %s log ---\n%s",
				pair[0], pair[1], methods["splice"], attempts, methods, errs, pair[0], nodeLog(src))
		}
	}
}

func nodeLog(h *topology.Host) string {
	b, _ := os.ReadFile(matrix.LogFile(h, "node"))
	return tail(string(b))
}

func tail(s string) string {
	if len(s) > 3000 {
		s = s[len(s)-3000:]
	}
	return strings.TrimSpace(s)
}
