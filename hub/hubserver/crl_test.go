package hubserver

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
)

// A node revoked at one hub is refused at once by another hub that shares
// no file with it and never rereads its own (issue 16): the first hub
// passes the newer list on over their link, the second checks the CA's
// signature and takes it, and cuts the node's attachment there too. A hub
// that links later gets the list when its link comes up.
func TestRevocationReachesPeerHub(t *testing.T) {
	g := pkitest.New(t, "grid")
	load := func() (*pki.Trust, string) {
		dir := t.TempDir()
		g.WriteGrid(t, dir)
		tr, err := pki.LoadTrust(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "crl.pem"))
		if err != nil {
			t.Fatal(err)
		}
		return tr, dir
	}
	member := func(trust *pki.Trust, role ca.Role, name string) *pki.Credentials {
		key, err := identity.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		c, err := pki.Certified(key, []*x509.Certificate{g.Cert(t, role, name, key, time.Time{}, 0)}, trust)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	start := func(name string, trust *pki.Trust, peers ...string) *Hub {
		h, err := New(Config{Name: name, Creds: member(trust, ca.Hub, name), Listen: "127.0.0.1:0", Peers: peers, Interval: testInterval, Logf: testLogf(t, "")})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.Serve(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return h
	}
	trustA, dirA := load()
	trustB, dirB := load()
	a := start("a", trustA)
	b := start("b", trustB, a.Addr().String())
	testwait.Until(t, "hubs a and b to link", 5*time.Second, func() bool { return len(a.Links()) != 0 && len(b.Links()) != 0 })
	nodeTrust, _ := load()
	evil := member(nodeTrust, ca.Node, "evil")
	attach := func() (*hub.Session, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return hub.Attach(ctx, hub.SessionConfig{Creds: evil, Machine: identity.Machine{Name: "evil"}, Hubs: []string{b.Addr().String()}, Logf: testLogf(t, "evil: ")})
	}
	before, err := attach()
	if err != nil {
		t.Fatalf("evil attaching to b before its revocation: %v", err)
	}
	defer before.Close()

	// The CA revokes evil; hub a's list file gets the new list and a
	// takes it (what its poll of the file does).
	crl2, err := g.CA.UpdateCRL(g.CRL, ca.CRLUpdate{Revoke: []*big.Int{evil.Certificate().Leaf.SerialNumber}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirA, "crl.pem"), ca.EncodeCRL(crl2), 0o644); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	if took, err := trustA.Reload(); !took || err != nil {
		t.Fatalf("hub a's reload: %v, %v", took, err)
	}
	// At once, evil tries hub b, which never rereads its file here.
	var refusal error
	admitted := 0
	for time.Since(revoked) < 2*time.Second {
		s, err := attach()
		if err == nil {
			admitted++
			s.Close()
			continue
		}
		if errors.Is(err, pki.ErrDenied) {
			refusal = err
			break
		}
		t.Fatalf("evil attaching to b after its revocation: %v", err)
	}
	took := time.Since(revoked)
	if refusal == nil {
		t.Fatalf("hub b admitted evil %d times in the %v after hub a took the list revoking it; want refused (hubs poll their files every 10 s)", admitted, took.Round(time.Millisecond))
	}
	t.Logf("refused by hub b %v after hub a took the list (admitted %d times before): %v", took.Round(time.Millisecond), admitted, refusal)
	if got := trustB.CRLs()[0].Number; got.Cmp(crl2.Number) != 0 {
		t.Errorf("hub b holds list %v, want %v", got, crl2.Number)
	}
	if data, _ := os.ReadFile(filepath.Join(dirB, "crl.pem")); string(data) != string(ca.EncodeCRL(g.CRL)) {
		t.Error("hub b's file changed: the test means hubs that share no files")
	}
	// The attachment evil had at b is cut too.
	testwait.Until(t, "evil's attachment to b made before its revocation to be cut", 2*time.Second, func() bool {
		for _, m := range b.Nodes() {
			if m.ID == evil.Key.ID() {
				return false
			}
		}
		return true
	})
	// A hub that links later, its file still holding the old list, gets
	// the new one at link-up.
	trustC, _ := load()
	start("c", trustC, b.Addr().String())
	testwait.Until(t, fmt.Sprintf("hub c, linked to b, to hold list %v", crl2.Number), 5*time.Second, func() bool {
		return trustC.CRLs()[0].Number.Cmp(crl2.Number) == 0
	})
}
