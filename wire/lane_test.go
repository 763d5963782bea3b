package wire

import (
	"bytes"
	"strings"
	"testing"
)

func laneSeeds() []*Message {
	m := testMachine()
	proof := bytes.Repeat([]byte{7}, LaneProofSize)
	return []*Message{
		{Kind: KHello, Hello: &Hello{Role: "hub", Machine: m, Version: VersionLanes, Lane: &LaneJoin{Proof: proof}}},
		{Kind: KHello, Hello: &Hello{Role: "hub", Machine: m, Version: VersionLanes}},
		{Kind: KRefused, Refusal: &Refusal{Code: RefusedLane, Reason: "no trunk from hub h2 to join"}},
	}
}

func TestLaneHello(t *testing.T) {
	for _, m := range laneSeeds() {
		got, err := Decode(Encode(m))
		if err != nil {
			t.Fatalf("%s: %v", Encode(m), err)
		}
		if !bytes.Equal(Encode(got), Encode(m)) {
			t.Fatalf("round trip: %s, want %s", Encode(got), Encode(m))
		}
	}
	m := testMachine()
	bad := []struct {
		h    Hello
		want string
	}{
		{Hello{Role: "node", Machine: m, Version: VersionLanes, Lane: &LaneJoin{Proof: make([]byte, LaneProofSize)}}, "only hubs"},
		{Hello{Role: "hub", Machine: m, Version: VersionLanes, Lane: &LaneJoin{Proof: make([]byte, 31)}}, "31 bytes"},
		{Hello{Role: "hub", Machine: m, Version: VersionLanes, Lane: &LaneJoin{}}, "0 bytes"},
		{Hello{Role: "hub", Machine: m, Version: VersionVirtual, Lane: &LaneJoin{Proof: make([]byte, LaneProofSize)}}, "version 2"},
	}
	for _, b := range bad {
		_, err := Decode(Encode(&Message{Kind: KHello, Hello: &b.h}))
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %v, want an error naming %q", Encode(&Message{Kind: KHello, Hello: &b.h}), err, b.want)
		}
	}
	// an older peer's hello (no lane field) still decodes as before.
	old := Encode(&Message{Kind: KHello, Hello: &Hello{Role: "hub", Machine: m, Version: VersionVirtual}})
	if bytes.Contains(old, []byte("lane")) {
		t.Fatalf("a hello without a lane join names one: %s", old)
	}
	if _, err := Decode(old); err != nil {
		t.Fatal(err)
	}
}

// FuzzLaneHello fuzzes Decode from lane hellos and refusals: whatever
// decodes re-encodes to the same, and a lane join that decodes is a hub's
// with a proof of the right size.
func FuzzLaneHello(f *testing.F) {
	for _, m := range laneSeeds() {
		f.Add(Encode(m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		msg, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Decode(Encode(msg))
		if err != nil || !bytes.Equal(Encode(again), Encode(msg)) {
			t.Fatalf("re-decode: %v", err)
		}
		if h := msg.Hello; h != nil && h.Lane != nil && (h.Role != "hub" || len(h.Lane.Proof) != LaneProofSize || h.Version < VersionLanes) {
			t.Fatalf("decoded a bad lane join %+v", h)
		}
	})
}
