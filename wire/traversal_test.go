package wire

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestTraversalMessages(t *testing.T) {
	m := testMachine()
	ep := []netip.AddrPort{netip.MustParseAddrPort("203.0.113.17:40001"), netip.MustParseAddrPort("203.0.113.17:40002")}
	good := []*Message{
		{Kind: KHubs, Hubs: &HubsQuery{Query: 3}},
		{Kind: KHubList, HubList: &HubList{Query: 3, Hubs: []RouteAd{{Hub: m.ID, Name: "pub", State: 2, Addrs: ep}}}},
		{Kind: KSplice, Splice: &Splice{Token: 7, From: &m, Port: 80, Target: m.ID, Addrs: ep}},
		{Kind: KSpliceReply, Splice: &Splice{Token: 7, Attempt: 1, Target: m.ID, Addrs: ep[:1]}},
		{Kind: KSplice, Splice: &Splice{Token: 7, From: &m, Port: SparePort, Target: m.ID, Addrs: ep, RTTUs: 192500}},
		{Kind: KSpliceReply, Splice: &Splice{Token: 7, Target: m.ID, Addrs: ep[:1], Early: true}},
		{Kind: KSpliceGo, Splice: &Splice{Token: 7, Attempt: 1, Target: m.ID}},
		{Kind: KSpliceFail, Fail: &Fail{Token: 7, Reason: "this host's NAT allocates ports at random", Code: FailNATRandom}},
		{Kind: KRouted, Routed: &Routed{FromHub: m.ID, ToHub: m.ID, TTL: 5, Msg: &Message{Kind: KSpliceGo, Splice: &Splice{Token: 1, Target: m.ID}}}},
	}
	for _, msg := range good {
		got, err := Decode(Encode(msg))
		if err != nil || !bytes.Equal(Encode(got), Encode(msg)) {
			t.Errorf("%s: %v", msg.Kind, err)
		}
	}
	id := m.ID.String()
	bad := map[string]string{
		`{"kind":"splice","splice":{"token":1,"target":"` + id + `","port":80,"addrs":["1.2.3.4:5"]}}`:                                                                                             "offer without its sender",
		`{"kind":"splice-reply","splice":{"token":1,"target":"` + id + `"}}`:                                                                                                                       "reply without endpoints",
		`{"kind":"splice-go","splice":{"token":1,"target":"` + id + `","from":{"id":"` + id + `"}}}`:                                                                                               "sender in a splice-go",
		`{"kind":"splice-reply","splice":{"token":1,"target":"` + id + `","addrs":["1.2.3.4:0"]}}`:                                                                                                 "bad endpoint",
		`{"kind":"splice-go","splice":{"token":1,"attempt":99,"target":"` + id + `"}}`:                                                                                                             "attempt 99",
		`{"kind":"hub-list","hub_list":{"query":1,"hubs":[{"state":2}]}}`:                                                                                                                          "route without a hub",
		`{"kind":"hubs","splice":{"token":1}}`:                                                                                                                                                     "missing or malformed body",
		`{"kind":"splice-reply","splice":{"token":1,"target":"` + id + `","addrs":["1.2.3.4:5"],"rtt_us":5}}`:                                                                                      "round trip estimate 5",
		`{"kind":"splice-go","splice":{"token":1,"target":"` + id + `","early":true}}`:                                                                                                             "early in a splice-go",
		`{"kind":"splice-reply","splice":{"token":1,"target":"` + id + `","addrs":["1.1.1.1:1","1.1.1.1:2","1.1.1.1:3","1.1.1.1:4","1.1.1.1:5","1.1.1.1:6","1.1.1.1:7","1.1.1.1:8","1.1.1.1:9"]}}`: "9 endpoints",
	}
	for in, want := range bad {
		if _, err := Decode([]byte(in)); err == nil || !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%s): %v, want %q", in, err, want)
		}
	}
}

func TestObserved(t *testing.T) {
	ap := netip.MustParseAddrPort("203.0.113.17:40001")
	b := AppendObserved(nil, ap)
	if string(b) != "OBSERVED 203.0.113.17:40001\n" {
		t.Fatalf("encoded %q", b)
	}
	if got, err := ParseObserved(b); err != nil || got != ap {
		t.Fatalf("parsed %v %v", got, err)
	}
	if got, err := ParseObserved([]byte("OBSERVED [::ffff:1.2.3.4]:5")); err != nil || got.String() != "1.2.3.4:5" {
		t.Errorf("mapped address: %v %v", got, err)
	}
	for _, in := range []string{"", "OBSERVED", "OBSERVED 1.2.3.4", "OBSERVED 1.2.3.4:0", "SEEN 1.2.3.4:5\n", "OBSERVED " + strings.Repeat("1", 60), "OBSERVED [fe80::1%eth0]:5"} {
		if _, err := ParseObserved([]byte(in)); !errors.Is(err, ErrFrame) {
			t.Errorf("ParseObserved(%q): %v", in, err)
		}
	}
}

func FuzzParseObserved(f *testing.F) {
	f.Add([]byte("OBSERVED 203.0.113.17:40001\n"))
	f.Add([]byte("OBSERVED [2001:db8::1]:9\n"))
	f.Add([]byte("OBSERVED [fe80::1%zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz]:9")) // 64 bytes, a zone
	f.Fuzz(func(t *testing.T, b []byte) {
		ap, err := ParseObserved(b)
		if err != nil {
			return
		}
		if got, err := ParseObserved(AppendObserved(nil, ap)); err != nil || got != ap {
			t.Fatalf("%v does not round-trip: %v %v", ap, got, err)
		}
	})
}
