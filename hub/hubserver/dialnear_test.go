package hubserver

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gridlink/gridlink/wire"
)

// With trunks bounded (Config.MaxLinks), a hub dials the nearest of the
// hubs it learns of first, whatever order the tables name them in: a
// neighbour's table names a far hub (80 ms away) before a near one (3 ms)
// with one slot left, and the near one is dialled, the far one not.
func TestDialNearestFirst(t *testing.T) {
	h := newTestHub(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h.ctx = ctx
	h.maxLinks = 2 // the neighbour's trunk and one more
	// no splices: a hub that cannot dial a learned hub would splice, and
	// first probe its NAT through the addresses of hubs it knows (the
	// far one's among them), which the far listener would count
	h.cfg.NoSplice = true
	a, _ := tablePeer(t, h, wire.Version)
	listen := func() (netip.AddrPort, <-chan struct{}) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		hit := make(chan struct{}, 16)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				hit <- struct{}{}
				c.Close()
			}
		}()
		return netip.MustParseAddrPort(ln.Addr().String()), hit
	}
	farAddr, far := listen()
	nearAddr, near := listen()
	x, y := creds(t).Key.ID(), creds(t).Key.ID()
	h.applyGossip(a, &wire.Gossip{Routes: []wire.RouteAd{
		{Hub: a.id, Name: "a", State: 100, Ver: wire.Version},
		{Hub: x, Name: "far", State: 200, Hops: 1, LatencyUs: 80000, Addrs: []netip.AddrPort{farAddr}, Ver: wire.Version},
		{Hub: y, Name: "near", State: 200, Hops: 1, LatencyUs: 3000, Addrs: []netip.AddrPort{nearAddr}, Ver: wire.Version},
	}})
	select {
	case <-near:
	case <-time.After(5 * time.Second):
		t.Fatal("the near hub was not dialled")
	}
	select {
	case <-far:
		t.Error("the far hub was dialled, with one slot left and a nearer hub")
	case <-time.After(300 * time.Millisecond):
	}
}
