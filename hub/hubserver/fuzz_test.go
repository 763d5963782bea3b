package hubserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/wire"
)

// fuzzPeer is a hub peer (hub or node) whose link writes into the void.
func fuzzPeer(t testing.TB, h *Hub, role string) *peer {
	a, b := net.Pipe()
	go io.Copy(io.Discard, b)
	t.Cleanup(func() { a.Close(); b.Close() })
	m := identity.Machine{ID: creds(t).Key.ID(), Name: role + "-peer"}
	p := h.newPeer(a, nil, &wire.Hello{Role: role, Machine: m}, role == "hub", false)
	if err := h.register(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// FuzzFrames feeds arbitrary frames to a hub's trunk handlers (from a
// node and from a hub): whatever arrives, nothing panics; bad input only
// ever ends the trunk with an error. (A session's handler: package hub's
// FuzzSessionFrames, with the same seeds.)
func FuzzFrames(f *testing.F) {
	someone := creds(f).Key.ID()
	open, _ := json.Marshal(&wire.Open{From: identity.Machine{ID: someone}, ToNode: someone, Port: 7, TTL: 3, Window: wire.InitialWindow})
	acc, _ := json.Marshal(&wire.Accept{Window: wire.InitialWindow})
	var seed []byte
	seed = wire.Append(seed, wire.TOpen, 1, open)
	seed = wire.Append(seed, wire.TOpen, 2, open)
	seed = wire.Append(seed, wire.TAccept, 2, acc)
	seed = wire.Append(seed, wire.TData, 1, []byte("data"))
	seed = wire.Append(seed, wire.TWindow, 1, wire.WindowPayload(100))
	seed = wire.Append(seed, wire.TPing, 1, make([]byte, 8))
	seed = wire.Append(seed, wire.TFin, 1, nil)
	seed = wire.AppendFlags(seed, wire.TReset, wire.FlagHub, 1, []byte("x"))
	f.Add(seed)
	f.Add(wire.Append(nil, wire.TControl, 0, wire.Encode(&wire.Message{Kind: wire.KGossip, Gossip: &wire.Gossip{Routes: []wire.RouteAd{
		{Hub: someone, Name: "x", State: 2, Hops: 1, Addrs: nil}, {Hub: someone, State: 3, Hops: wire.Unreachable}}}})))
	f.Add(wire.Append(nil, wire.TControl, 0, wire.Encode(&wire.Message{Kind: wire.KLookup, Lookup: &wire.Lookup{Query: 1, Node: "n"}})))
	f.Add(wire.Append(nil, wire.TControl, 0, wire.Encode(&wire.Message{Kind: wire.KRouted, Routed: &wire.Routed{ToHub: someone, ToNode: someone, TTL: 2,
		Msg: &wire.Message{Kind: wire.KReverse, Reverse: &wire.Reverse{Token: 1, From: identity.Machine{ID: someone}, Port: 1}}}})))
	f.Add(wire.Append(nil, wire.TControl, 0, wire.Encode(&wire.Message{Kind: wire.KFound, Found: &wire.Found{Query: 1}})))
	f.Add(wire.Append(nil, wire.TControl, 0, wire.Encode(&wire.Message{Kind: wire.KMachine, Machine: &identity.Machine{ID: someone, Name: "node-peer"}})))
	f.Add(wire.Append(nil, wire.TControl, 0, wire.Encode(&wire.Message{Kind: wire.KMachine, Machine: &identity.Machine{ID: someone, Name: "node-peer", Virtual: []netip.Addr{netip.MustParseAddr("100.96.0.1")}}})))
	f.Add(wire.Append(nil, wire.TControl, 0, wire.Encode(&wire.Message{Kind: wire.KVirtual, Virtual: &wire.Virtual{Query: 1, V4: netip.MustParseAddr("100.96.0.1")}})))
	f.Add(wire.Append(nil, wire.TControl, 0, wire.Encode(&wire.Message{Kind: wire.KLookupAddr, LookupAddr: &wire.LookupAddr{Query: 1, Addr: netip.MustParseAddr("fd67:726c::1")}})))

	h, err := New(Config{Name: "fuzz", Creds: creds(f), Listen: "127.0.0.1:0", Logf: quiet})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { h.ln.Close() })
	h.ctx = context.Background()
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, role := range []string{"node", "hub"} {
			p := fuzzPeer(t, h, role)
			r := wire.NewReader(bytes.NewReader(b))
			for {
				fr, err := r.Read()
				if err != nil || p.handle(fr) != nil {
					break
				}
			}
			p.t.Close(nil)
			h.unregister(p, hub.ErrClosedByPeer)
		}
		// and on a further connection of a hub's trunk (lanes.go).
		p := fuzzPeer(t, h, "hub")
		x, y := net.Pipe()
		go io.Copy(io.Discard, y)
		l := &lane{t: hub.NewTrunk(x, nil, "lane", false)}
		p.addLane(l)
		r := wire.NewReader(bytes.NewReader(b))
		for {
			fr, err := r.Read()
			if err != nil || p.handleOn(l, fr) != nil {
				break
			}
		}
		l.t.Close(nil)
		p.t.Close(nil)
		h.unregister(p, hub.ErrClosedByPeer)
		x.Close()
		y.Close()
	})
}
