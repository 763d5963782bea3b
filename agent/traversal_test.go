package agent

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/nat"
	"github.com/gridlink/gridlink/status"
)

func TestNATWords(t *testing.T) {
	at := time.Now().Add(-90 * time.Second)
	random := nat.Class{Allocation: nat.Random, External: netip.MustParseAddr("203.0.113.21")}
	preserving := nat.Class{Allocation: nat.Preserving, Mapping: nat.EndpointIndependent, External: netip.MustParseAddr("203.0.113.17")}
	info := func(c nat.Class) status.NAT {
		return status.NAT{Class: c.String(), Allocation: c.Allocation.String(), Predictable: c.Predictable(), At: at}
	}
	cases := map[string]status.NAT{
		"NAT: not classified yet":                                       {},
		"NAT: not known: the hubs could not observe":                    {Error: "no hub to observe this host from", At: at},
		"NAT: none: the hubs see this host's connections come from its": info(nat.Class{Allocation: nat.None}),
		"NAT: random, external address 203.0.113.21 (classified 1m30s ago from the hubs' observations); it picks external ports at random": info(random),
		"--portmap": info(random),
		"port-preserving, endpoint-independent mapping, external address 203.0.113.17": info(preserving),
		"so splicing can work": info(preserving),
	}
	for want, i := range cases {
		if got := i.Words(); !strings.Contains(got, want) {
			t.Errorf("%+v: %q, want it to say %q", i, got, want)
		}
	}
}

func TestPortMapWords(t *testing.T) {
	at := time.Now().Add(-time.Minute)
	mapped := status.PortMap{Enabled: true, Mapped: true, Protocol: "nat-pmp", Gateway: "192.168.15.1", Internal: "192.168.15.2:40001",
		External: "203.0.113.21:40001", Advertised: "203.0.113.21:40001", LeaseS: 600, Renewals: 2, At: at}
	expired := mapped
	expired.Advertised, expired.Error = "", "no answer from 192.168.15.1"
	cases := map[string]status.PortMap{
		"port mapping: off (start the node with --portmap":                          {},
		"port mapping: none yet":                                                    {Enabled: true},
		"port mapping: none, asked 1m0s ago: portmap: no gateway mapped tcp port 7": {Enabled: true, Error: "portmap: no gateway mapped tcp port 7: ...", At: at},
		"port mapping: nat-pmp from 192.168.15.1 maps 203.0.113.21:40001 to 192.168.15.2:40001 (a lease of 10m0s, renewed 2 times); others reach this node directly at 203.0.113.21:40001": mapped,
		"renewing it fails and its lease ran out: not advertised (no answer from 192.168.15.1)":                                                                                            expired,
		"(a permanent lease)":          {Enabled: true, Mapped: true, Advertised: "203.0.113.21:1"},
		"not bound to: not advertised": {Enabled: true, Mapped: true},
	}
	for want, i := range cases {
		if got := i.Words(); !strings.Contains(got, want) {
			t.Errorf("%+v: %q, want it to say %q", i, got, want)
		}
	}
}

// /status and /doctor report the NAT and the port mapping (off here: unit
// tests never probe a network).
func TestStatusReportsTraversal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, c := startAgent(t, "gamma", startHub(t))
	st, err := c.Status(ctx)
	if err != nil || st.PortMap.Enabled || st.PortMap.Mapped || !strings.Contains(st.PortMap.Words(), "off") {
		t.Fatalf("status: %+v, %v", st, err)
	}
	// the node classifies its NAT a few seconds after start: on loopback,
	// none.
	deadline := time.Now().Add(15 * time.Second)
	for {
		d, err := c.Doctor(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if !d.NAT.At.IsZero() {
			if d.NAT.Error != "" || d.NAT.Allocation != nat.None.String() || !strings.HasPrefix(d.NAT.Words(), "NAT: none") {
				t.Errorf("doctor's NAT on loopback: %+v (%s)", d.NAT, d.NAT.Words())
			}
			if d.PortMap.Enabled {
				t.Errorf("doctor's port mapping: %+v", d.PortMap)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no NAT classification after 15s: %+v", d.NAT)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The words of the status schema are package nat's: NAT.Words tells the
// allocations apart by their names.
func TestAllocationWords(t *testing.T) {
	for a, want := range map[nat.Allocation]string{nat.None: status.AllocNone, nat.Preserving: status.AllocPreserving,
		nat.Sequential: status.AllocSequential, nat.Random: status.AllocRandom, nat.Unknown: status.AllocUnknown} {
		if a.String() != want {
			t.Errorf("nat's %q is %q in package status", a, want)
		}
	}
}
