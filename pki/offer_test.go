package pki_test

import (
	"crypto/x509"
	"math/big"
	"testing"

	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/chain"
	"github.com/gridlink/gridlink/pki/pkitest"
)

// A revocation list another hub offers is taken only if the grid's CA
// signed it and it is newer than the one in force; the sender of an older
// one learns it is behind.
func TestOfferCRL(t *testing.T) {
	g := pkitest.New(t, "grid")
	n := g.Member(t, ca.Node, "n")
	// A hub's own trust, apart from the grid's, holding list 1.
	trust, err := pki.NewTrust(chain.Config{Roots: []*x509.Certificate{g.CA.Cert}, CRLs: []*x509.RevocationList{g.CRL}})
	if err != nil {
		t.Fatal(err)
	}
	list1 := g.CRL
	g.Revoke(t, n.Certificate().Leaf) // list 2
	list2 := g.CRL
	changed := trust.Changed()
	if o, err := trust.Offer(list2.Raw); err != nil || o != pki.Newer {
		t.Fatalf("offer of list 2 over 1: %v, %v; want it taken", o, err)
	}
	select {
	case <-changed:
	default:
		t.Error("taking list 2 did not fire Changed")
	}
	if _, err := trust.Verify([][]byte{n.Certificate().Leaf.Raw}); err == nil {
		t.Error("the node revoked by list 2 still verifies")
	}
	if o, err := trust.Offer(list2.Raw); err != nil || o != pki.Same {
		t.Errorf("offer of list 2 again: %v, %v; want the same", o, err)
	}
	if o, err := trust.Offer(list1.Raw); err != nil || o != pki.Older {
		t.Errorf("offer of list 1: %v, %v; want older", o, err)
	}
	// Another grid's list, numbered higher: not signed by our CA.
	other := pkitest.New(t, "other")
	var prev *x509.RevocationList
	for range 5 {
		if prev, err = other.CA.UpdateCRL(prev, ca.CRLUpdate{Revoke: []*big.Int{big.NewInt(7)}}); err != nil {
			t.Fatal(err)
		}
	}
	if o, err := trust.Offer(prev.Raw); err == nil {
		t.Errorf("offer of another CA's list: %v, want an error", o)
	}
	// Tampered: list 3 with one bit of its signature flipped.
	list3, err := g.CA.UpdateCRL(list2, ca.CRLUpdate{})
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), list3.Raw...)
	bad[len(bad)-3] ^= 1
	if o, err := trust.Offer(bad); err == nil {
		t.Errorf("offer of a tampered list: %v, want an error", o)
	}
	if _, err := trust.Offer([]byte("not a list")); err == nil {
		t.Error("offer of garbage taken")
	}
	if got := trust.CRLs(); len(got) != 1 || got[0].Number.Cmp(list2.Number) != 0 {
		t.Errorf("list in force: %v", got)
	}
}
