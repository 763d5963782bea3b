package hubserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/netns"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/internal/testwait"
)

const labHubPort = 7946

// nsDial dials from inside a lab host.
func nsDial(h *topology.Host) func(ctx context.Context, spec string) (net.Conn, error) {
	return func(ctx context.Context, spec string) (net.Conn, error) {
		var c net.Conn
		err := netns.Do(lab.HostNS(h), func() (err error) {
			var d net.Dialer
			c, err = d.DialContext(ctx, "tcp4", spec)
			return err
		})
		return c, err
	}
}

// labHub runs a hub in lab host h, dialling peers.
func labHub(t *testing.T, h *topology.Host, name string, peers ...string) *Hub {
	t.Helper()
	var hub *Hub
	err := netns.Do(lab.HostNS(h), func() (err error) {
		// NoSplice: splicing opens sockets of its own, which in this
		// process would be made in the root namespace, not h's (hubs run
		// as processes inside their namespace splice; internal/lab/matrix tests it).
		hub, err = New(Config{Name: name, Creds: creds(t), Listen: fmt.Sprintf("0.0.0.0:%d", labHubPort), Peers: peers,
			Dial: nsDial(h), Interval: 200 * time.Millisecond, Logf: testLogf(t, ""), NoSplice: true})
		return err
	})
	if err != nil {
		t.Fatalf("hub on %s: %v", h.ID(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hub.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return hub
}

// addrOn is host h's address on a net it shares with from (or its public
// one), with the hub port.
func addrOn(from, h *topology.Host) string {
	for _, a := range from.Ifaces {
		for _, b := range h.Ifaces {
			if a.Net == b.Net {
				return fmt.Sprintf("%s:%d", b.Addr, labHubPort)
			}
		}
	}
	return fmt.Sprintf("%s:%d", h.PrimaryAddr(), labHubPort)
}

func labNode(t *testing.T, h, hubHost *topology.Host) *hub.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := hub.Attach(ctx, hub.SessionConfig{Creds: creds(t), Machine: identity.Machine{Name: h.ID()}, Hubs: []string{addrOn(h, hubHost)},
		Dial: nsDial(h), Logf: testLogf(t, "")})
	if err != nil {
		t.Fatalf("attach %s: %v", h.ID(), err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// In grid6, hubs on the frontends of das3v, g5k and rockstar: the two
// firewalled sites link outward to das3v (their own dials in fail), g5k
// and rockstar reach each other through das3v, and a compute node of g5k
// (non-routed: no way out but its hub) reaches a das3v node through a
// routed circuit.
func TestLabGrid6Overlay(t *testing.T) {
	topo := labtest.Up(t, "grid6", nil)
	host := func(name string) *topology.Host { return labtest.Host(t, topo, name) }
	dasFE, g5kFE, rockFE := host("das3v-fe"), host("g5k-fe"), host("rockstar-fe")
	pub := func(h *topology.Host) string { return fmt.Sprintf("%s:%d", h.PrimaryAddr(), labHubPort) }
	das := labHub(t, dasFE, "das3v", pub(g5kFE), pub(rockFE))
	g5k := labHub(t, g5kFE, "g5k", pub(dasFE), pub(rockFE))
	rock := labHub(t, rockFE, "rockstar", pub(dasFE), pub(g5kFE))

	routeTo := func(from, to *Hub) Route {
		for _, r := range from.Routes() {
			if r.Hub == to.ID() {
				return r
			}
		}
		return Route{}
	}
	testwait.Until(t, "g5k and rockstar to reach each other", 30*time.Second, func() bool {
		return routeTo(g5k, rock).Reachable() && routeTo(rock, g5k).Reachable()
	})
	if r := routeTo(g5k, rock); r.Hops != 2 || r.NextHop != das.ID() {
		t.Errorf("g5k's route to rockstar: %+v; want 2 hops via das3v", r)
	}
	// 56 ms x 0.1 between das3v and g5k: the route's latency is the link's
	// round trip.
	if r := routeTo(g5k, das); r.Latency < 5*time.Millisecond || r.Latency > 50*time.Millisecond {
		t.Errorf("g5k's route to das3v has latency %v, want about 5.6 ms", r.Latency)
	}
	for _, l := range das.Links() {
		if l.Role == "hub" && l.Dialed {
			t.Errorf("das3v dialled %s through a firewall", l.Name)
		}
	}
	for _, h := range []*Hub{g5k, rock} {
		links := h.Links()
		if len(links) != 1 || links[0].Name != "das3v" || !links[0].Dialed {
			t.Errorf("%s's links: %+v; want one, dialled, to das3v", h.Name(), links)
		}
	}

	n1 := host("das3v-n1")
	g1 := host("g5k-n1")
	if c, err := labtest.Dial(g1, fmt.Sprintf("%s:%d", n1.PrimaryAddr(), 7000), "", time.Second); err == nil {
		c.Close()
		t.Fatal("g5k-n1 reached das3v-n1 directly: the lab is not what this test assumes")
	}
	das1 := labNode(t, n1, dasFE)
	g5k1 := labNode(t, g1, g5kFE)
	if obs := g5k1.Observed(); !obs.IsValid() || obs.Addr() != g1.Ifaces[0].Addr {
		t.Errorf("g5k-n1 observed as %v, want its address %v", obs, g1.Ifaces[0].Addr)
	}
	serve(das1, 7000, func(c *hub.Circuit) {
		defer c.Close()
		n, sum, err := recvHash(c)
		if err != nil || n != 4<<20 {
			return
		}
		c.Write(sum[:])
		sendHash(c, 9, 4<<20)
		c.CloseWrite()
	})
	ms, err := g5k1.Lookup(context.Background(), "das3v-n1")
	if err != nil || len(ms) != 1 || ms[0].HubName != "das3v" {
		t.Fatalf("lookup das3v-n1 from g5k-n1: %+v %v", ms, err)
	}
	start := time.Now()
	cir, err := g5k1.Open(context.Background(), ms[0], 7000)
	if err != nil {
		t.Fatal(err)
	}
	defer cir.Close()
	sent, err := sendHash(cir, 8, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	cir.CloseWrite()
	got := make([]byte, 32)
	if _, err := io.ReadFull(cir, got); err != nil || string(got) != string(sent[:]) {
		t.Fatalf("das3v-n1 hashed something else: %x %v", got, err)
	}
	n, sum, err := recvHash(cir)
	want, _ := sendHash(discard{}, 9, 4<<20)
	if err != nil || n != 4<<20 || sum != want {
		t.Fatalf("g5k-n1 received %d bytes (%v), hash match %v", n, err, sum == want)
	}
	t.Logf("4 MiB each way g5k-n1 -> g5k hub -> das3v hub -> das3v-n1 in %v", time.Since(start).Round(time.Millisecond))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
