package cli

import (
	"bytes"
	"crypto/x509"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/pki/chain"
	"github.com/gridlink/gridlink/pki/pkitest"
)

// The testing aid that lets lab tests present bad chains is in no shipped
// binary: without -tags gridlinktesting no command knows the flag, and
// passing it is an error. In a testing build it is on every command that
// runs a hub or a node, and in no help text.
func TestUncheckedFlagNotShipped(t *testing.T) {
	for _, c := range Root().Commands() {
		f := c.Flags().Lookup(testingUncheckedFlag)
		if c.Flags().Lookup("ca") == nil || !testingAid {
			if f != nil {
				t.Errorf("%s has --%s (testing build: %v)", c.Name(), testingUncheckedFlag, testingAid)
			}
			continue
		}
		if f == nil || !f.Hidden {
			t.Errorf("%s: --%s missing or not hidden (%+v)", c.Name(), testingUncheckedFlag, f)
		}
		var help bytes.Buffer
		c.SetOut(&help)
		_ = c.Help()
		if strings.Contains(help.String(), testingUncheckedFlag) {
			t.Errorf("%s's help shows --%s", c.Name(), testingUncheckedFlag)
		}
	}
	if testingAid {
		return
	}
	root := Root()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"hub", "--name", "lax", "--listen", "127.0.0.1:0", "--" + testingUncheckedFlag})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "unknown flag: --"+testingUncheckedFlag) {
		t.Errorf("hub --%s: %v; want an unknown flag", testingUncheckedFlag, err)
	}
}

// Without the testing aid a bad chain stops the process up front; with
// it the chain is presented as it is, judged by --ca's trust, or, without
// --ca, by no one.
func TestUncheckedCredentials(t *testing.T) {
	dir := t.TempDir()
	g := pkitest.New(t, "testgrid")
	var expired pkitest.Outsider
	for _, o := range g.Outsiders(t) {
		if errors.Is(o.Want, chain.ErrExpired) && o.Chain[0].Subject.CommonName == "expired" {
			expired = o
		}
	}
	if expired.Creds == nil {
		t.Fatal("no expired outsider")
	}
	g.WriteGrid(t, dir)
	files := pkitest.WriteCreds(t, dir, "expired", expired.Creds.Key, expired.Chain)
	key, err := identity.LoadKey(files.Key)
	if err != nil {
		t.Fatal(err)
	}
	caFile, crlFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "crl.pem")

	sf := secFlags{caFile: caFile, crlFile: crlFile, certFile: files.Cert, maxProxyLife: chain.DefaultMaxProxyLifetime}
	if _, _, err := sf.credentials(key); !errors.Is(err, chain.ErrExpired) {
		t.Errorf("an expired certificate without the testing aid: %v, want refused as expired", err)
	}
	sf.unchecked = true
	creds, trust, err := sf.credentials(key)
	if err != nil || trust == nil || creds.Trust() != trust {
		t.Fatalf("the testing aid with --ca: %v (trust %v)", err, trust)
	}
	if got := creds.Certificate().Certificate[0]; !bytes.Equal(got, expired.Chain[0].Raw) {
		t.Error("the testing aid does not present the chain of --cert")
	}

	// a hub that presents a grid hub's certificate and admits anyone
	hubCert := g.Cert(t, ca.Hub, "hub", key, time.Time{}, 0)
	hubFiles := pkitest.WriteCreds(t, dir, "hub", key, []*x509.Certificate{hubCert})
	open := secFlags{certFile: hubFiles.Cert, unchecked: true}
	creds, trust, err = open.credentials(key)
	if err != nil || trust != nil || creds.Trust() != nil {
		t.Fatalf("the testing aid without --ca: %v (trust %v)", err, trust)
	}
	if got := creds.Certificate().Certificate[0]; !bytes.Equal(got, hubCert.Raw) {
		t.Error("the testing aid without --ca does not present the chain of --cert")
	}
	open.unchecked = false
	if _, _, err := open.credentials(key); err == nil || !strings.Contains(err.Error(), "need --ca") {
		t.Errorf("--cert without --ca: %v", err)
	}
	if _, _, err := (&secFlags{crlFile: crlFile}).credentials(key); err == nil || !strings.Contains(err.Error(), "--crl needs --ca") {
		t.Errorf("--crl without --ca: %v", err)
	}
}
