package agent

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
	"github.com/gridlink/gridlink/vconn"
)

// A proxy restricted to a service reaches it by the name it is exposed
// under: the lookup in the node's directory is open to any proxy whose
// restriction reaches that node. A proxy for another node is refused
// there, the lookup included, the reason named.
func TestRestrictedProxyByName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := pkitest.New(t, "testgrid")
	h, err := hubserver.New(hubserver.Config{Name: "site", Creds: g.Member(t, ca.Hub, "site"), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	hctx, hcancel := context.WithCancel(context.Background())
	t.Cleanup(hcancel)
	go h.Serve(hctx)
	start := func(name string, creds *pki.Credentials) *control.Client {
		sock := fmt.Sprintf("@gridlink-test-%d-%s", os.Getpid(), name)
		a, err := Start(context.Background(), Config{Control: sock, Node: vconn.Config{Name: name, Creds: creds, Hubs: []string{h.Addr().String()}, ListenAddr: "127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return control.Dial(sock)
	}
	beta := start("beta", g.Member(t, ca.Node, "beta"))
	ex, err := beta.Expose(ctx, control.ExposeRequest{Local: hashServer(t), Port: 2222, Name: "hash"})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	alice := g.User(t, "alice", "physics")
	betaID := func() string {
		st, err := beta.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Node.ID.String()
	}()
	connect := func(who string, restrict []string) error {
		c := start(who, g.Proxy(t, alice, proxy.Options{Restrict: restrict}))
		conn, err := c.Connect(ctx, control.ConnectRequest{Addr: "beta:hash"})
		if err != nil {
			return err
		}
		go func() { conn.Write([]byte("x")); conn.(interface{ CloseWrite() error }).CloseWrite() }()
		b, err := io.ReadAll(conn)
		conn.Close()
		if err == nil && len(b) != 32 {
			err = fmt.Errorf("answer of %d bytes", len(b))
		}
		return err
	}
	if err := connect("anywhere", []string{"port-2222"}); err != nil {
		t.Errorf("a proxy restricted to port-2222, to beta:hash: %v", err)
	}
	if err := connect("atbeta", []string{"port-2222@" + betaID}); err != nil {
		t.Errorf("a proxy restricted to port-2222 at beta, to beta:hash: %v", err)
	}
	other := "port-2222@3qv3ylp4bh5oeakeagmqwfbnzu6xdn7buh5npxn6jjvdqwtgyzqa"
	if err := connect("elsewhere", []string{other}); err == nil || !strings.Contains(err.Error(), "may not use port-11 at beta: its proxy is restricted to [port-2222 at node 3qv3ylp4bh]") {
		t.Errorf("a proxy for another node, to beta:hash: %v; want refused at beta's directory", err)
	}
}
