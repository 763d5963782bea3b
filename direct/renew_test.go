package direct

import (
	"context"
	"testing"
	"time"

	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
)

// A listener presents the chain its credentials hold at each handshake:
// after a renewal (a user's agent whose proxy `gridlink proxy init`
// renewed) the next dialler sees the new one, not the one the listener
// started with.
func TestListenerPresentsRenewedChain(t *testing.T) {
	g := pkitest.New(t, "grid")
	user := g.User(t, "alice")
	first, srv := g.ProxyFor(t, user, 2*time.Minute)
	l, err := Listen(context.Background(), ListenConfig{Creds: srv, Addr: "127.0.0.1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := &Dialer{Creds: g.Member(t, ca.Node, "cli"), Local: noLocal}
	seen := func() time.Time {
		t.Helper()
		go func() {
			if c, err := l.Accept(); err == nil {
				c.Close()
			}
		}()
		c, err := d.Dial(context.Background(), l.Machine(srv.Key.ID(), "alice-n"), "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.Conn.Peer.Chain.NotAfter
	}
	if end := seen(); !end.Equal(first.Leaf().NotAfter) {
		t.Fatalf("the dialler saw a chain until %v, want %v", end, first.Leaf().NotAfter)
	}
	renewed := pkitest.Renewed(t, user, first, time.Hour)
	cert := renewed[0]
	if err := srv.Renew(renewed); err != nil {
		t.Fatal(err)
	}
	if end := seen(); !end.Equal(cert.NotAfter) {
		t.Errorf("after the renewal the dialler saw a chain until %v, want %v", end, cert.NotAfter)
	}
}
