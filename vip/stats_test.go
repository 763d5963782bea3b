package vip

import (
	"encoding/json"
	"net"
	"testing"
	"time"
)

// The per-peer status: path, since when, traffic and drops by reason,
// as plain JSON.
func TestPeerStatsJSON(t *testing.T) {
	g := newGrid(t, 3, nil)
	a, b, c := g.nodes[0], g.nodes[1], g.nodes[2]
	p := udp4(a.v4, b.v4, "to b", 100)
	a.send(t, p)
	expect(t, b, p, "a packet to b")
	waitSent(t, a, b, 1)

	evil, theirs := net.Pipe()
	defer evil.Close()
	if err := a.net.Accept(theirs, c.id); err != nil {
		t.Fatal(err)
	}
	liar := udp4(c.v4, a.v4, "liar", 100)
	liar[3] = 99
	own := udp4(c.v4, a.v4, "c", 100)
	go evil.Write(frames(liar, udp4(c.v4, b.v4, "to b through a", 100), own))
	expect(t, a, own, "c's packet after its bad ones")

	s := a.net.Stats()
	if pc := s.Peer(c.id); pc.Malformed != 1 || pc.NotForUs != 1 || pc.RecvPackets != 1 {
		t.Errorf("a's peer c: %+v; want 1 malformed, 1 not for a, 1 received", pc)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		MTU   int            `json:"mtu"`
		Drops map[string]int `json:"drops"`
		Peers []map[string]any
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	if out.MTU != 1500 || out.Drops["malformed"] != 1 || out.Drops["not_for_us"] != 1 || len(out.Peers) != 2 {
		t.Fatalf("JSON: %s", raw)
	}
	for _, pj := range out.Peers {
		if pj["id"] != b.id.String() {
			continue
		}
		since, _ := time.Parse(time.RFC3339Nano, pj["since"].(string))
		if pj["method"] != "direct" || pj["sent_packets"] != 1.0 || pj["conns"] != 1.0 || time.Since(since) > time.Minute || pj["queued"] != 0.0 {
			t.Errorf("b in JSON: %v", pj)
		}
		return
	}
	t.Errorf("b not in the JSON: %s", raw)
}
