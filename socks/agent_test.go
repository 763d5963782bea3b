package socks

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
)

// The agent backend on two loopback agents: CONNECT to an exposed
// service, the reply codes of unknown names, closed ports and ordinary
// hosts, and a BIND whose peer comes through the other agent's SOCKS
// server.
func TestAgentBackend(t *testing.T) {
	clients, socksAddr, _ := agents(t, "alpha", "beta")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// beta exposes an echo service.
	el, _ := net.Listen("tcp", "127.0.0.1:0")
	defer el.Close()
	go func() {
		for {
			c, err := el.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	ex, err := clients[1].Expose(ctx, control.ExposeRequest{Local: el.Addr().String(), Port: 7000})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()

	c, rep, _ := request(t, socksAddr[0], encodeRequest(CmdConnect, Addr{Host: "beta.grid", Port: 7000}))
	if rep != ReplySucceeded {
		t.Fatalf("CONNECT beta.grid:7000: reply %#x", rep)
	}
	c.Write([]byte("ping"))
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo: %q %v", got, err)
	}
	c.Close()
	for _, tc := range []struct {
		a    Addr
		want byte
	}{
		{Addr{Host: "Beta.GRID", Port: 7000}, ReplySucceeded}, // names in any case, as DNS
		{Addr{Host: "BETA.Grid", Port: 7000}, ReplySucceeded},
		{Addr{Host: "nosuch.grid", Port: 22}, ReplyHostUnreachable},
		{Addr{Host: "beta.grid", Port: 7001}, ReplyRefused},
		{Addr{Host: "example.org", Port: 80}, ReplyNotAllowed},
		{Addr{IP: ipv4zero(), Port: 80}, ReplyNotAllowed},
	} {
		c, rep, _ := request(t, socksAddr[0], encodeRequest(CmdConnect, tc.a))
		c.Close()
		if rep != tc.want {
			t.Errorf("CONNECT %s: reply %#x, want %#x", tc.a, rep, tc.want)
		}
	}

	// BIND on alpha for beta; the peer CONNECTs through beta's SOCKS server.
	bc, rep, bound := request(t, socksAddr[0], encodeRequest(CmdBind, Addr{Host: "beta.grid"}))
	defer bc.Close()
	if rep != ReplySucceeded || !strings.HasPrefix(bound.Host, "alpha.grid") {
		t.Fatalf("BIND: reply %#x at %s", rep, bound)
	}
	pc, rep, _ := request(t, socksAddr[1], encodeRequest(CmdConnect, bound))
	defer pc.Close()
	if rep != ReplySucceeded {
		t.Fatalf("CONNECT to the bound %s: %#x", bound, rep)
	}
	rep, from, err := readReply(bc)
	if err != nil || rep != ReplySucceeded || from.Host != "beta.grid" {
		t.Fatalf("second BIND reply: %#x %s %v", rep, from, err)
	}
	pc.Write([]byte("over the bind"))
	pc.(*net.TCPConn).CloseWrite()
	back, _ := io.ReadAll(io.LimitReader(bc, 13))
	if !bytes.Equal(back, []byte("over the bind")) {
		t.Fatalf("bound side got %q", back)
	}
}
