package vconn

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
)

// A connection the node cuts because its peer was revoked says so to its
// reader and writer (CutError, wrapping the revocation), not "use of
// closed network connection".
func TestCutConnSaysWhy(t *testing.T) {
	g := pkitest.New(t, "testgrid")
	h := certHub(t, "hub", g.Member(t, ca.Hub, "hub"), &logBook{})
	srvCreds := g.Member(t, ca.Node, "srv")
	srv, err := certNode(t, "srv", srvCreds, &logBook{}, h)
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, srv, 7)
	alice, err := certNode(t, "alice", g.Member(t, ca.Node, "alice"), &logBook{}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := alice.DialMachine(ctx, srv.Machine(), 7)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echoOnce(t, c)
	g.Revoke(t, srvCreds.Certificate().Leaf)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, rerr := c.Read(make([]byte, 1))
	_, werr := c.Write([]byte("x"))
	for what, err := range map[string]error{"read": rerr, "write": werr} {
		var ce *CutError
		if !errors.As(err, &ce) || ce.Peer.ID != srv.ID() || !strings.Contains(err.Error(), "revoked") {
			t.Errorf("%s on the cut connection: %v; want a CutError naming srv's revocation", what, err)
		}
	}
}
