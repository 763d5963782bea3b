package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"

	"github.com/gridlink/gridlink/identity"
)

func TestFrameRoundTrip(t *testing.T) {
	var b []byte
	b = Append(b, TControl, 0, []byte(`{}`))
	b = Append(b, TData, 7, bytes.Repeat([]byte{1}, 1000))
	b = Append(b, TWindow, 7, WindowPayload(65536))
	b = Append(b, TFin, 7, nil)
	b = AppendFlags(b, TReset, FlagHub, 7, []byte("no route to hub x"))
	r := NewReader(bytes.NewReader(b))
	want := []Frame{
		{Type: TControl, Payload: []byte(`{}`)},
		{Type: TData, Circuit: 7, Payload: bytes.Repeat([]byte{1}, 1000)},
		{Type: TWindow, Circuit: 7, Payload: WindowPayload(65536)},
		{Type: TFin, Circuit: 7, Payload: []byte{}},
		{Type: TReset, Flags: FlagHub, Circuit: 7, Payload: []byte("no route to hub x")},
	}
	for _, w := range want {
		f, err := r.Read()
		if err != nil || f.Type != w.Type || f.Flags != w.Flags || f.Circuit != w.Circuit || !bytes.Equal(f.Payload, w.Payload) {
			t.Fatalf("read %v, %v; want %v", f, err, w)
		}
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("at end: %v, want EOF", err)
	}
}

func TestBadFrames(t *testing.T) {
	hdr := func(t Type, flags byte, circuit uint32, n int) []byte {
		b := make([]byte, HeaderSize)
		PutHeader(b, t, circuit, n)
		b[1] = flags
		return b
	}
	cases := map[string][]byte{
		"unknown type 0":                   hdr(0, 0, 1, 0),
		"unknown type 200":                 hdr(200, 0, 1, 0),
		"reserved bits":                    hdr(TData, 1, 1, 0),
		"reset frame with reserved bits":   hdr(TReset, 2, 1, 0),
		"data frame with reserved bits":    hdr(TData, FlagHub, 1, 0),
		"more than the":                    hdr(TData, 0, 1, MaxPayload+1),
		"control frame on circuit":         hdr(TControl, 0, 3, 0),
		"without a circuit":                hdr(TData, 0, 0, 0),
		"window frame of 3 bytes":          hdr(TWindow, 0, 1, 3),
		"stream ended inside a data frame": append(hdr(TData, 0, 1, 10), 1, 2),
		"stream ended inside a header":     {1, 0, 0},
	}
	for want, b := range cases {
		_, err := NewReader(bytes.NewReader(b)).Read()
		if !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v", want, err)
		}
	}
}

func testMachine() identity.Machine {
	return identity.Machine{ID: identity.KeyFromSeed(make([]byte, 32)).ID(), Name: "das3v-n1",
		Addrs: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.11:7000")}}
}

func TestMessages(t *testing.T) {
	m := testMachine()
	msgs := []*Message{
		{Kind: KHello, Hello: &Hello{Role: "node", Machine: m, Version: 1}},
		{Kind: KGossip, Gossip: &Gossip{Routes: []RouteAd{
			{Hub: m.ID, Name: "das3v", State: 4, Hops: 1, LatencyUs: 100, Addrs: m.Addrs, Nodes: 3},
			{Hub: m.ID, State: 5, Hops: Unreachable},
		}}},
		{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, TTL: 5, Msg: &Message{Kind: KLookup, Lookup: &Lookup{Query: 1, Node: "x"}}}},
		{Kind: KFound, Found: &Found{Query: 1, Matches: []identity.Machine{m}}},
		{Kind: KReverse, Reverse: &Reverse{Token: 9, From: m, Port: 80, Target: m.ID}},
		{Kind: KReverseFail, Fail: &Fail{Token: 9, Reason: "connection refused"}},
		{Kind: KReverseFail, Fail: &Fail{Token: 9, Reason: "hub a: no route to hub b", Code: FailNoHubRoute}},
		{Kind: KMachine, Machine: &m},
		{Kind: KMachine, Machine: &identity.Machine{ID: m.ID, Addrs: m.Addrs, NAT: netip.MustParseAddr("203.0.113.7")}},
	}
	for _, msg := range msgs {
		got, err := Decode(Encode(msg))
		if err != nil || got.Kind != msg.Kind || !bytes.Equal(Encode(got), Encode(msg)) {
			t.Errorf("%s: %v", msg.Kind, err)
		}
	}
	bad := map[string]string{
		`{"kind":"hello"}`:                      "0 bodies, want exactly 1",
		`{"kind":"nope","fail":{}}`:             `unknown kind "nope"`,
		`{"kind":"hello","hello":{"role":"x"}}`: "missing or malformed body",
		`{"kind":"fail","extra":1}`:             "unknown field",
		`{"kind":"reverse-fail","fail":{}} x`:   "trailing data",
		`{"kind":"splice-fail","fail":{"token":1,"code":"` + strings.Repeat("c", 33) + `"}}`: "missing or malformed body",
		`{"kind":"routed","routed":{"ttl":1,"msg":{"kind":"routed","routed":{"ttl":1}}}}`:    "cannot route",
		`{"kind":"hello","hello":{"role":"node","machine":{}}}`:                              "machine without an ID",
		`{"kind":"gossip","gossip":{"routes":[{"state":2}]}}`:                                "route without a hub",
		`{"kind":"gossip","gossip":{"routes":[{"hub":"` + m.ID.String() + `","hops":256}]}}`: "256 hops",
		`{"kind":"gossip","gossip":{"routes":[{"hub":"` + m.ID.String() + `","nodes":-1}]}}`: "negative",
		`{"kind":"machine"}`:                                 "0 bodies, want exactly 1",
		`{"kind":"machine","machine":{}}`:                    "machine without an ID",
		`{"kind":"machine","lookup":{"query":1,"node":"x"}}`: "missing or malformed body",
		`{"kind":"machine","machine":{"id":"x"}}`:            "control message",
		`{"kind":"machine","machine":{"id":"` + m.ID.String() + `","addrs":["1.2.3.4:5"],"port":1}}`:                                  "unknown field",
		`{"kind":"machine","machine":{"id":"` + m.ID.String() + `","name":"` + strings.Repeat("n", 65) + `"}}`:                        "name too long",
		`{"kind":"machine","machine":{"id":"` + m.ID.String() + `","addrs":[` + strings.Repeat(`"1.2.3.4:5",`, 32) + `"1.2.3.4:6"]}}`: "more than 32 addresses",
		`{"kind":"routed","routed":{"ttl":1,"msg":{"kind":"machine","machine":{"id":"` + m.ID.String() + `"}}}}`:                      "cannot route a machine message",
	}
	for in, want := range bad {
		if _, err := Decode([]byte(in)); err == nil || !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%s): %v, want %q", in, err, want)
		}
	}
	o := Open{From: m, ToHub: m.ID, ToNode: m.ID, Port: 80, TTL: 3, Window: 1 << 20}
	ob, _ := json.Marshal(o)
	if got, err := DecodeOpen(ob); err != nil || got.Port != 80 {
		t.Errorf("DecodeOpen: %+v %v", got, err)
	}
	for _, w := range []uint32{0, MaxWindow + 1} {
		o.Window = w
		ob, _ = json.Marshal(o)
		if _, err := DecodeOpen(ob); err == nil || !strings.Contains(err.Error(), "window") {
			t.Errorf("DecodeOpen with window %d: %v", w, err)
		}
	}
	if a, err := DecodeAccept([]byte(`{"window":262144}`)); err != nil || a.Window != InitialWindow {
		t.Errorf("DecodeAccept: %+v %v", a, err)
	}
	for _, in := range []string{`{"window":1}`, `{"window":16777217}`, `{}`, `{"window":262144,"x":1}`} {
		if _, err := DecodeAccept([]byte(in)); err == nil || !errors.Is(err, ErrFrame) {
			t.Errorf("DecodeAccept(%s): %v", in, err)
		}
	}
	if n, err := DecodeWindow(WindowPayload(5)); err != nil || n != 5 {
		t.Errorf("DecodeWindow: %d %v", n, err)
	}
	for _, p := range [][]byte{WindowPayload(0), WindowPayload(MaxWindow + 1), {1}} {
		if _, err := DecodeWindow(p); err == nil || !errors.Is(err, ErrFrame) {
			t.Errorf("DecodeWindow(%x): %v", p, err)
		}
	}
	if (&RouteAd{State: 3}).Reachable() || (&RouteAd{State: 2, Hops: Unreachable}).Reachable() || !(&RouteAd{State: 2, Hops: 3}).Reachable() {
		t.Error("RouteAd.Reachable")
	}
}

func FuzzReader(f *testing.F) {
	f.Add(Append(Append(nil, TControl, 0, []byte(`{"kind":"lookup","lookup":{"query":1,"node":"a"}}`)), TData, 1, []byte("hi")))
	f.Add(Append(nil, TWindow, 3, WindowPayload(5)))
	f.Add(AppendFlags(Append(nil, TAccept, 3, []byte(`{"window":262144}`)), TReset, FlagHub, 3, []byte("no route")))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewReader(bytes.NewReader(b))
		for {
			fr, err := r.Read()
			if err != nil {
				return
			}
			if len(fr.Payload) > MaxPayload {
				t.Fatalf("payload of %d bytes", len(fr.Payload))
			}
			if fr.Type == TControl {
				_, _ = Decode(fr.Payload)
			}
			switch fr.Type {
			case TOpen:
				_, _ = DecodeOpen(fr.Payload)
			case TAccept:
				_, _ = DecodeAccept(fr.Payload)
			case TWindow:
				_, _ = DecodeWindow(fr.Payload)
			}
			if fr.Flags != 0 && fr.Type != TReset {
				t.Fatalf("flags %#x on a %s frame", fr.Flags, fr.Type)
			}
		}
	})
}

func FuzzDecode(f *testing.F) {
	m := testMachine()
	f.Add(Encode(&Message{Kind: KHello, Hello: &Hello{Role: "hub", Machine: m}}))
	f.Add(Encode(&Message{Kind: KGossip, Gossip: &Gossip{Routes: []RouteAd{{Hub: m.ID, Name: "g", State: 2, Hops: 1, Addrs: m.Addrs}}}}))
	f.Add(Encode(&Message{Kind: KGossip, Gossip: &Gossip{Routes: []RouteAd{{Hub: m.ID, Name: "g", State: 3, Hops: Unreachable, Ver: VersionDelta}}}})) // delta.go
	f.Add(Encode(&Message{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KReverse, Reverse: &Reverse{From: m, Port: 1}}}}))
	f.Add(Encode(&Message{Kind: KMachine, Machine: &m}))
	f.Add(Encode(&Message{Kind: KMoved, Moved: &Moved{To: m.ID}})) // moved.go
	f.Add(Encode(&Message{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KSpliceFail, Fail: &Fail{Token: 1, Reason: "r", Code: FailNATRandom}}}}))
	f.Add(Encode(&Message{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KSplice, Splice: &Splice{Token: 1, From: &m, Port: SparePort, Target: m.ID, Addrs: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:9")}, RTTUs: 192500}}}}))
	f.Add(Encode(&Message{Kind: KRefused, Refusal: &Refusal{Code: RefusedNameTaken, Reason: "taken", Holder: &m}}))
	f.Add(Encode(&Message{Kind: KRefused, Refusal: &Refusal{Code: RefusedBadName, Reason: `bad node or hub name "c.grid"`}}))
	longName := m
	longName.Name = strings.Repeat("x", 300) // a node's hello: read, then refused by name (names.go)
	f.Add(Encode(&Message{Kind: KHello, Hello: &Hello{Role: "node", Machine: longName}}))
	f.Add(Encode(&Message{Kind: KHello, Hello: &Hello{Role: "hub", Machine: longName}}))
	f.Add(Encode(&Message{Kind: KHello, Hello: &Hello{Role: "node", Machine: m, Version: VersionInstance, Instance: "0123456789abcdef0123456789abcdef"}})) // instance.go
	f.Add(Encode(&Message{Kind: KRefused, Refusal: &Refusal{Code: RefusedAttached, Reason: "attached", Holder: &m}}))
	f.Add(Encode(&Message{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KClaim, Claim: &Claim{Query: 1, Name: "n", Holding: Holding{Node: m, Owner: "o", SinceMs: 1}}}}}))
	withVirtual := m
	withVirtual.Virtual = []netip.Addr{netip.MustParseAddr("100.96.0.5"), netip.MustParseAddr("fd67:726c::5")}
	f.Add(Encode(&Message{Kind: KFound, Found: &Found{Query: 1, Matches: []identity.Machine{withVirtual}}}))
	f.Add(Encode(unreachedFound()))
	f.Add(Encode(&Message{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, Msg: &Message{Kind: KClaimed, Claimed: &Claimed{Query: 1, Holders: []Holding{{Node: m, Owner: "o", Bound: true, Attached: true}}}}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		msg, err := Decode(b)
		if err != nil {
			return
		}
		// whatever decodes re-encodes and decodes to the same.
		again, err := Decode(Encode(msg))
		if err != nil || !bytes.Equal(Encode(again), Encode(msg)) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

// A Reader keeps no payload buffer past the next frame: a 64 KiB frame's
// goes back to its pool when the next frame is read, and a small frame
// needs none.
func TestReaderReturnsPayloadBuffers(t *testing.T) {
	stream := Append(Append(Append(nil, TData, 1, bytes.Repeat([]byte{7}, 64<<10)), TPing, 0, make([]byte, 8)), TData, 1, []byte("tail"))
	r := NewReader(bytes.NewReader(stream))
	f, err := r.Read()
	if err != nil || len(f.Payload) != 64<<10 || f.Payload[0] != 7 {
		t.Fatalf("got %v, %v; want the 64 KiB frame", f, err)
	}
	if r.body == nil {
		t.Fatal("a 64 KiB payload in no pooled buffer")
	}
	for _, want := range []Type{TPing, TData} {
		if f, err := r.Read(); err != nil || f.Type != want {
			t.Fatalf("got %v, %v; want a %s frame", f, err, want)
		}
		if r.body != nil {
			t.Fatalf("reading a %s frame of %d bytes keeps a payload buffer of %d", want, len(f.Payload), cap(*r.body))
		}
	}
	for n, class := range map[int]int{65: 0, 128: 0, 129: 1, 64 << 10: 9, 64<<10 + 1: 10, MaxPayload: maxBodyShift - minBodyShift} {
		if c := bodyClass(n); c != class {
			t.Errorf("bodyClass(%d) = %d, want %d", n, c, class)
		}
		if b := getBody(n); len(*b) < n || bodyClass(cap(*b)) != class {
			t.Errorf("getBody(%d) gave %d bytes", n, len(*b))
		}
	}
}
