package socks

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/gridlink/gridlink/agent"
	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/vconn"
)

// startHub serves a hub of fresh credentials on loopback until ctx ends,
// and returns its address.
func startHub(t *testing.T, ctx context.Context) string {
	t.Helper()
	key, _ := identity.NewKey()
	creds, _ := pki.NewCredentials(key)
	h, err := hubserver.New(hubserver.Config{Name: "site", Creds: creds, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	go h.Serve(ctx)
	return h.Addr().String()
}

// startAgent starts the agent of node name on hub (cfg's Node.Logf
// kept), until the test ends, and returns its client.
func startAgent(t *testing.T, ctx context.Context, hub, name string, cfg agent.Config) *control.Client {
	t.Helper()
	cfg.Control = fmt.Sprintf("@gridlink-sockstest-%d-%s-%s", os.Getpid(), t.Name(), name)
	cfg.Node = vconn.Config{Name: name, Hubs: []string{hub}, ListenAddr: "127.0.0.1", Logf: cfg.Node.Logf}
	a, err := agent.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return control.Dial(cfg.Control)
}

// A SOCKS client whose gridlink socks goes through an exit is refused
// the exit host's loopback (by address and by a name resolving there),
// reply 0x02; gridlink socks's log names the exit and its reason, and the
// exit's log says the same with the member's identity.
func TestExitRefusesLoopback(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hub := startHub(t, ctx)
	var exitLog, socksLog testwait.Log
	startAgent(t, ctx, hub, "exitnode", agent.Config{AllowExit: true, Node: vconn.Config{Logf: exitLog.Logf}})
	member := startAgent(t, ctx, hub, "alpha", agent.Config{})
	st, err := member.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	socksAddr := startServer(t, &Server{Backend: &AgentBackend{Client: member, Exit: "exitnode"}, Logf: socksLog.Logf})
	// a loopback-only service of the exit host, as its metrics are
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close() // connected to from its backlog, if the exit let it: nothing accepts
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	for _, c := range []struct {
		a    Addr
		want string
	}{
		{Addr{IP: netip.MustParseAddr("127.0.0.1"), Port: port}, fmt.Sprintf("exit node exitnode refuses 127.0.0.1:%d: loopback of the exit host", port)},
		{Addr{Host: "localhost", Port: port}, fmt.Sprintf("exit node exitnode refuses localhost:%d: localhost resolves to ", port)},
	} {
		conn, rep, _ := request(t, socksAddr, encodeRequest(CmdConnect, c.a))
		conn.Close()
		if rep != ReplyNotAllowed {
			t.Errorf("CONNECT %s through the exit: reply %#x, want %#x (not allowed)", c.a, rep, ReplyNotAllowed)
		}
		socksLog.Line(t, c.want)
		exitLog.Line(t, fmt.Sprintf("exit refused %q (%s) from node ", st.Node.ID.String(), st.Node.ID.Short()), c.want)
	}
}
