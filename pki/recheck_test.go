package pki_test

import (
	"crypto/x509"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/chain"
	"github.com/gridlink/gridlink/pki/pkitest"
)

// A peer admitted earlier fails Recheck once its certificate is revoked,
// and Changed fires for the new list; a peer that expires later does not
// (on synthetic time: the certificate expires 1 s after it was admitted).
func TestRecheckRevoked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := pkitest.New(t, "grid")
		judge := g.Member(t, ca.Hub, "hub")
		n1, n2 := g.Member(t, ca.Node, "n1"), g.Member(t, ca.Node, "n2")
		cert := func(c *pki.Credentials) *x509.Certificate { return c.Certificate().Leaf }
		p1, err := judge.Check([]*x509.Certificate{cert(n1)})
		if err != nil {
			t.Fatal(err)
		}
		p2, err := judge.Check([]*x509.Certificate{cert(n2)})
		if err != nil {
			t.Fatal(err)
		}
		short := g.Cert(t, ca.Node, "short", n1.Key, time.Now().Add(-time.Hour), time.Hour+time.Second)
		p3, err := judge.Check([]*x509.Certificate{short})
		if err != nil {
			t.Fatal(err)
		}
		changed := g.Trust.Changed()
		if err := g.Trust.Recheck(p1); err != nil {
			t.Fatalf("before revocation: %v", err)
		}
		g.Revoke(t, cert(n1))
		select {
		case <-changed:
		default:
			t.Fatal("Changed did not fire for a new revocation list")
		}
		if err := g.Trust.Recheck(p1); !errors.Is(err, chain.ErrRevoked) {
			t.Errorf("n1 after its revocation: %v, want revoked", err)
		}
		if err := g.Trust.Recheck(p2); err != nil {
			t.Errorf("n2, not revoked: %v", err)
		}
		if _, err := judge.Check([]*x509.Certificate{short}); err != nil {
			t.Fatalf("short, 1 s before it expires: %v", err)
		}
		time.Sleep(time.Second + 1) // short has expired since it was admitted
		if _, err := judge.Check([]*x509.Certificate{short}); err == nil {
			t.Fatal("short admitted anew after it expired")
		}
		if err := g.Trust.Recheck(p3); err != nil {
			t.Errorf("a certificate that expired after admission: %v, want still admitted", err)
		}
		if err := g.Trust.Recheck(pki.Peer{ID: n1.Key.ID()}); err != nil {
			t.Errorf("a peer of an open grid: %v", err)
		}
	})
}
