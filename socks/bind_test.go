package socks

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent"
	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/vconn"
)

// agents starts a loopback hub and an agent per name on it, each with a
// SOCKS server, and returns their control clients, SOCKS addresses and
// the agents' logs.
func agents(t *testing.T, names ...string) ([]*control.Client, []string, []*logLines) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	hub := startHub(t, ctx)
	var clients []*control.Client
	var addrs []string
	var logs []*logLines
	for _, name := range names {
		log := &logLines{}
		c := startAgent(t, ctx, hub, name, agent.Config{Node: vconn.Config{Logf: log.logf}})
		clients = append(clients, c)
		addrs = append(addrs, startServer(t, &Server{Backend: &AgentBackend{Client: c}}))
		logs = append(logs, log)
	}
	return clients, addrs, logs
}

// A BIND admits only the node its DST.ADDR names (RFC 1928): mallory,
// another member, dials the bound port first and is refused, naming
// the peer expected, on both ends; the bind waits on and beta, the
// expected peer, then gets through. A DST.ADDR that names no node is not
// allowed.
func TestBindAdmitsOnlyDST(t *testing.T) {
	clients, socksAddr, logs := agents(t, "alpha", "beta", "mallory")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	bc, rep, bound := request(t, socksAddr[0], encodeRequest(CmdBind, Addr{Host: "beta.grid"}))
	defer bc.Close()
	if rep != ReplySucceeded {
		t.Fatalf("BIND for beta.grid: reply %#x", rep)
	}
	target := control.VirtualAddr(bound.String())
	_, err := clients[2].Connect(ctx, control.ConnectRequest{Addr: target})
	const want = "this bind admits only beta"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("mallory's connect to the bind at %s: %v; want refused: %q", target, err, want)
	}
	testwait.Until(t, "alpha's log naming the refusal", 0, func() bool { return logs[0].has(want) })

	pc, err := clients[1].Connect(ctx, control.ConnectRequest{Addr: target})
	if err != nil {
		t.Fatalf("beta's connect to the bind after mallory's: %v", err)
	}
	defer pc.Close()
	bc.SetDeadline(time.Now().Add(30 * time.Second))
	rep, from, err := readReply(bc)
	if err != nil || rep != ReplySucceeded || from.Host != "beta.grid" {
		t.Fatalf("second BIND reply: %#x from %s, %v; want beta.grid", rep, from, err)
	}
	pc.Write([]byte("beta here"))
	got := make([]byte, 9)
	if _, err := io.ReadFull(bc, got); err != nil || string(got) != "beta here" {
		t.Fatalf("the bound side read %q, %v", got, err)
	}

	for _, dst := range []Addr{{IP: ipv4zero()}, {Host: "example.org"}} {
		c, rep, _ := request(t, socksAddr[0], encodeRequest(CmdBind, dst))
		c.Close()
		if rep != ReplyNotAllowed {
			t.Errorf("BIND for %s: reply %#x, want %#x (not allowed)", dst, rep, ReplyNotAllowed)
		}
	}
}

// The ports of successive BINDs are chosen at random: a member cannot
// tell which port the next bind gets (they were the first free one from
// 49152, the same or the next each time).
func TestBindPortsUnpredictable(t *testing.T) {
	_, socksAddr, _ := agents(t, "alpha", "beta")
	var ports []uint16
	seen := map[uint16]bool{}
	var conns []net.Conn
	for i := 0; i < 6; i++ {
		c, rep, bound := request(t, socksAddr[0], encodeRequest(CmdBind, Addr{Host: "beta.grid"}))
		if rep != ReplySucceeded {
			t.Fatalf("BIND %d: reply %#x", i, rep)
		}
		ports = append(ports, bound.Port)
		seen[bound.Port] = true
		if i%2 == 0 {
			c.Close() // every other bind ends before the next
		} else {
			conns = append(conns, c)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	sequential := 0
	for i := 1; i < len(ports); i++ {
		if d := int(ports[i]) - int(ports[i-1]); d >= 0 && d <= 1 {
			sequential++
		}
	}
	if len(seen) < len(ports)-1 || sequential > 1 {
		t.Errorf("BIND ports %v: want them at random, not the same or sequential", ports)
	}
	for _, p := range ports {
		if p < 49152 || p == 0xffff {
			t.Errorf("BIND port %d outside 49152-65534", p)
		}
	}
}
