package chain_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/chain"
	"github.com/gridlink/gridlink/pki/proxy"
)

// The life of a user credential: the CA certifies alice's key, alice makes
// a proxy (single sign-on), delegates a restricted proxy to a service, and
// a node validates what the service presents.
func Example() {
	grid, _ := ca.New(ca.Config{Name: "das3"}) // gridlink ca init
	_, userKey, _ := ed25519.GenerateKey(rand.Reader)
	userCert, _ := grid.Issue(ca.Request{Role: ca.User, Name: "alice", Groups: []string{"vu"}, Key: userKey.Public()}) // gridlink cert issue
	alice := &proxy.Credential{Chain: []*x509.Certificate{userCert}, Key: userKey}

	mine, _ := proxy.New(alice, proxy.Options{}) // gridlink proxy init: 12 h

	target, _ := identity.NewKey()                                 // the node the service is to reach
	xfer := proxy.Entry("xfer", target.ID())                       // xfer at that node only
	pending, req, _ := proxy.NewRequest(time.Hour, []string{xfer}) // at the service
	r, _ := proxy.ParseRequest(req)                                // at alice's
	answer, _ := proxy.Delegate(mine, r, proxy.Options{})
	delegated, _ := pending.Accept(answer) // at the service

	crl, _ := grid.UpdateCRL(nil, ca.CRLUpdate{})
	v, _ := chain.New(chain.Config{Roots: []*x509.Certificate{grid.Cert}, CRLs: []*x509.RevocationList{crl}})
	res, err := v.Verify(delegated.Certificate().Certificate, time.Now()) // at a node
	if err != nil {
		fmt.Println(err)
		return
	}
	other, _ := identity.NewKey()
	fmt.Println(res.Subject(), res.Role, res.Groups, res.Proxies, res.Allows("xfer", target.ID()), res.Allows("xfer", other.ID()), res.Allows("perf", target.ID()))
	// Output: CN=alice,OU=user,O=das3 user [vu] 2 true false false
}
