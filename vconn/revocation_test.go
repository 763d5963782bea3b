package vconn

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
)

// A member revoked while connected is cut off: the service closes its
// open connections (direct and routed), its hub
// closes its attachment and refuses it again, and everything names why.
// Other members keep theirs.
func TestRevokedCutOff(t *testing.T) {
	g := pkitest.New(t, "testgrid")
	hubLogs, srvLogs := &logBook{}, &logBook{}
	h := certHub(t, "hub", g.Member(t, ca.Hub, "hub"), hubLogs)
	srv, err := certNode(t, "srv", g.Member(t, ca.Node, "srv"), srvLogs, h)
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, srv, 7)
	node := func(name string, creds *pki.Credentials, m Method) *Node {
		n, err := Start(context.Background(), Config{Name: name, Creds: creds, ListenAddr: "127.0.0.1", Hubs: []string{h.Addr().String()}, Methods: []Method{m}, Logf: (&logBook{}).logf})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type open struct {
		name string
		c    *Conn
	}
	var evil, good []open
	var revoke []*pki.Credentials
	for _, m := range []Method{Direct, Routed} {
		for _, who := range []string{"evil", "good"} {
			creds := g.Member(t, ca.Node, who+"-"+string(m))
			if who == "evil" {
				revoke = append(revoke, creds)
			}
			n := node(who+"-"+string(m), creds, m)
			c, err := n.DialMachine(ctx, srv.Machine(), 7)
			if err != nil {
				t.Fatalf("%s %s: %v", who, m, err)
			}
			echoOnce(t, c)
			if who == "evil" {
				evil = append(evil, open{string(m), c})
			} else {
				good = append(good, open{string(m), c})
			}
		}
	}
	for _, creds := range revoke {
		g.Revoke(t, creds.Certificate().Leaf)
	}
	for _, o := range evil {
		_ = o.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := o.c.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
			t.Errorf("evil's %s connection after its revocation: read %d, %v; want it closed", o.name, n, err)
		}
	}
	for _, o := range good {
		echoOnce(t, o.c)
	}
	srvLogs.wait(t, "service closing evil's connections", "no longer admitted", "evil", "revoked")
	for _, creds := range revoke {
		hubLogs.wait(t, "hub closing evil's attachment", "closing the link of evil", creds.Key.ID().Short(), "revoked")
		hubLogs.wait(t, "hub refusing evil again", "revoked", creds.Key.ID().Short(), "not admitted")
	}
}

// echoOnce sends a byte through an echo connection and reads it back.
func echoOnce(t *testing.T, c *Conn) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("echo write over %s: %v", c.Method(), err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("echo read over %s: %v", c.Method(), err)
	}
}
