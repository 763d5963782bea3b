package pki_test

import (
	"crypto/x509"
	"errors"
	"slices"
	"testing"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/pkitest"
	"github.com/gridlink/gridlink/pki/proxy"
)

// A hub's or node's certificate certifies its CN and aliases, nothing
// else; a user's node and an open grid's go by any name.
func TestNames(t *testing.T) {
	g := pkitest.New(t, "grid")
	key, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := g.CA.Issue(ca.Request{Role: ca.Node, Name: "das3v-n1", Aliases: []string{"n1", "das3v-data", "n1"}, Key: key.Private().Public()})
	if err != nil {
		t.Fatal(err)
	}
	node, err := pki.Certified(key, []*x509.Certificate{cert}, g.Trust)
	if err != nil {
		t.Fatal(err)
	}
	self, err := node.Self()
	if err != nil {
		t.Fatal(err)
	}
	if got := self.Names(); !slices.Equal(got, []string{"das3v-n1", "das3v-data", "n1"}) {
		t.Errorf("names %q", got)
	}
	for _, n := range []string{"das3v-n1", "n1", "das3v-data", ""} {
		if err := self.MayUse(n); err != nil {
			t.Errorf("MayUse(%q): %v", n, err)
		}
	}
	err = self.MayUse("srvhome")
	var ne *pki.NameError
	if !errors.Is(err, pki.ErrNameNotCertified) || !errors.As(err, &ne) || ne.Name != "srvhome" {
		t.Errorf("MayUse(srvhome): %v", err)
	}
	if self.Owner() != "CN=das3v-n1,OU=node,O=grid" || node.DefaultName("host") != "das3v-n1" {
		t.Errorf("owner %q, default name %q", self.Owner(), node.DefaultName("host"))
	}

	alice := g.Proxy(t, g.User(t, "alice"), proxy.Options{})
	as, err := alice.Self()
	if err != nil {
		t.Fatal(err)
	}
	if err := as.MayUse("srvhome"); err != nil || as.Binds("alice") || as.Owner() != "CN=alice,OU=user,O=grid" || alice.DefaultName("cp-x") != "cp-x" {
		t.Errorf("a user's proxy: MayUse %v, owner %q, default %q", err, as.Owner(), alice.DefaultName("cp-x"))
	}

	open, err := pki.NewCredentials(key)
	if err != nil {
		t.Fatal(err)
	}
	os, err := open.Self()
	if err != nil || os.MayUse("anything") != nil || os.Owner() != key.ID().String() || open.DefaultName("h") != "h" {
		t.Errorf("open grid: %v, owner %q", err, os.Owner())
	}
}

// Aliases are for hubs and nodes only, and checked like names.
func TestAliasesRefused(t *testing.T) {
	g := pkitest.New(t, "grid")
	key, _ := identity.NewKey()
	for _, r := range []ca.Request{
		{Role: ca.User, Name: "alice", Aliases: []string{"srvhome"}, Key: key.Private().Public()},
		{Role: ca.Node, Name: "n", Aliases: []string{"bad name"}, Key: key.Private().Public()},
	} {
		if _, err := g.CA.Issue(r); err == nil {
			t.Errorf("issued %+v", r)
		}
	}
}
