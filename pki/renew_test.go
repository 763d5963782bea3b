package pki_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
)

// Renew swaps the chain handshakes present from then on: a connection
// set up before keeps its peer's old chain, the next one sees the new;
// a chain for another key, or one the trust refuses, changes nothing.
func TestRenew(t *testing.T) {
	g := pkitest.New(t, "grid")
	user := g.User(t, "alice")
	first, creds := g.ProxyFor(t, user, 2*time.Minute)
	srv := g.Member(t, ca.Node, "srv")
	peerEnd := func() time.Time {
		t.Helper()
		a, b := pki.TCPPair(t)
		defer a.Close()
		defer b.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got := make(chan time.Time, 1)
		go func() {
			c, err := srv.Server(ctx, b, nil)
			if err != nil {
				t.Error(err)
				got <- time.Time{}
				return
			}
			got <- c.Peer.Chain.NotAfter
		}()
		if _, err := creds.Client(ctx, a, srv.Key.ID(), nil); err != nil {
			t.Fatal(err)
		}
		return <-got
	}
	if end := peerEnd(); !end.Equal(first.Leaf().NotAfter) {
		t.Fatalf("the server saw a chain until %v, want %v", end, first.Leaf().NotAfter)
	}
	renewed := pkitest.Renewed(t, user, first, time.Hour)
	cert := renewed[0]
	if err := creds.Renew(renewed); err != nil {
		t.Fatal(err)
	}
	if end := peerEnd(); !end.Equal(cert.NotAfter) {
		t.Errorf("after Renew the server saw a chain until %v, want %v", end, cert.NotAfter)
	}
	other, err := proxy.New(user, proxy.Options{Lifetime: 3 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := creds.Renew(other.Chain); !errors.Is(err, pki.ErrNewKey) {
		t.Errorf("a chain for another key: %v, want ErrNewKey", err)
	}
	outsider := pkitest.New(t, "other").User(t, "mallory")
	if err := creds.Renew(pkitest.Renewed(t, outsider, first, time.Hour)); err == nil {
		t.Error("a chain of another CA renewed the credentials")
	}
	if end := peerEnd(); !end.Equal(cert.NotAfter) {
		t.Errorf("after refused renewals the server saw a chain until %v, want %v", end, cert.NotAfter)
	}
}
