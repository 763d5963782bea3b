package hub

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/wire"
)

// creds makes fresh credentials.
func creds(t testing.TB) *pki.Credentials {
	t.Helper()
	k, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	c, err := pki.NewCredentials(k)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func quiet(string, ...any) {}

// FuzzSessionFrames feeds arbitrary frames to a session's trunk handler
// (with the seeds of hubserver's FuzzFrames, which feeds a hub's):
// whatever arrives, nothing panics; bad input only ever ends the trunk
// with an error.
func FuzzSessionFrames(f *testing.F) {
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
	f.Add(wire.Append(nil, wire.TControl, 0, wire.Encode(&wire.Message{Kind: wire.KFound, Found: &wire.Found{Query: 1, Answered: 2,
		Unreached: []wire.HubUnreached{{Hub: someone, Name: "das3v", Cause: wire.UnreachedRoute, SinceMs: 1}, {Hub: someone, Cause: wire.UnreachedNoAnswer, WaitMs: 2000}}}})))
	f.Add(wire.Append(nil, wire.TControl, 0, wire.Encode(&wire.Message{Kind: wire.KMachine, Machine: &identity.Machine{ID: someone, Name: "node-peer"}})))
	f.Add(wire.Append(nil, wire.TControl, 0, wire.Encode(&wire.Message{Kind: wire.KVirtualAck, VirtualAck: &wire.VirtualAck{V4: netip.MustParseAddr("100.96.0.1"),
		Taken: []wire.AddrTaken{{Addr: netip.MustParseAddr("fd67:726c::1"), Holder: identity.Machine{ID: someone}, Reason: "held"}}}})))

	f.Fuzz(func(t *testing.T, b []byte) {
		s := &Session{cfg: SessionConfig{Machine: identity.Machine{ID: someone, Name: "n"}}, machine: identity.Machine{ID: someone, Name: "n"}, logf: quiet, lookups: map[uint64]chan *wire.Found{},
			messages: make(chan *wire.Routed, 1), incoming: make(chan *Incoming, 1), done: make(chan struct{})}
		a, c := net.Pipe()
		go io.Copy(io.Discard, c)
		defer a.Close()
		defer c.Close()
		sl := &slink{s: s, hub: identity.Machine{ID: someone, Name: "h"}, circuits: map[uint32]*Circuit{}, nextCirc: 1}
		sl.t = NewTrunk(a, nil, "hub h", false)
		cir, _ := s.openOn(sl, identity.Machine{ID: someone}, 7)
		r := wire.NewReader(bytes.NewReader(b))
		for {
			fr, err := r.Read()
			if err != nil || sl.handle(fr) != nil {
				break
			}
		}
		if cir != nil {
			cir.Close()
		}
		sl.t.Close(nil)
		s.detach(sl, ErrClosedByPeer)
	})
}
