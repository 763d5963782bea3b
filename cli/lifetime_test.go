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
	"github.com/gridlink/gridlink/pki/proxy"
)

// run runs the command line args and returns its error.
func run(args ...string) error {
	root := Root()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	return root.Execute()
}

// Non-positive and overlong lifetimes are refused, not replaced by a
// default; proxy init's --restrict takes only names a restriction can use.
func TestLifetimeAndRestrictFlags(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cert", "issue", "--dir", dir, "--name", "n1", "--days", "-1"}, "--days -1: want a positive number of days"},
		{[]string{"cert", "issue", "--dir", dir, "--name", "n1", "--days", "0"}, "--days 0: want a positive number of days"},
		{[]string{"proxy", "init", "--cert", missing, "--key", missing, "--hours", "-5"}, "--hours -5: want a positive lifetime"},
		{[]string{"proxy", "init", "--cert", missing, "--key", missing, "--hours", "0"}, "--hours 0: want a positive lifetime"},
		{[]string{"proxy", "init", "--cert", missing, "--key", missing, "--hours", "100000"}, "--hours 100000: longer than the 168h0m0s a proxy may live"},
		{[]string{"proxy", "init", "--cert", missing, "--key", missing, "--hours", "200", "--max-lifetime", "0s"}, "--max-lifetime 0s: want a positive duration"},
		{[]string{"proxy", "init", "--cert", missing, "--key", missing, "--restrict", "myweb"}, `--restrict myweb: unknown service "myweb": want echo, or port-N`},
		{[]string{"proxy", "init", "--cert", missing, "--key", missing, "--restrict", "echo,port-7"}, `--restrict port-7: service "port-7": port 7 goes by "echo"`},
		{[]string{"proxy", "init", "--cert", missing, "--key", missing, "--restrict", "port-02811"}, `unknown service "port-02811"`},
		{[]string{"proxy", "init", "--cert", missing, "--key", missing, "--restrict", "port-2811@nobody"}, "--restrict port-2811@nobody: bad node"},
		{[]string{"hub", "--name", "h", "--listen", "127.0.0.1:0", "--ca", missing, "--max-proxy-lifetime", "-1h"}, "--max-proxy-lifetime -1h0m0s: want a positive duration"},
	} {
		if err := run(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want %q", tc.args, err, tc.want)
		}
	}
	// What --restrict accepts passes on to reading the certificate.
	id := "3qv3ylp4bh5oeakeagmqwfbnzu6xdn7buh5npxn6jjvdqwtgyzqa"
	for _, r := range []string{"echo", "port-2811", "port-2811@" + id, "echo@" + id + ",port-22"} {
		if err := run("proxy", "init", "--cert", missing, "--key", missing, "--hours", "168", "--restrict", r); err == nil || !strings.Contains(err.Error(), "missing.pem") {
			t.Errorf("--restrict %s: %v; want only the missing certificate refused", r, err)
		}
	}
}

// A node's --max-proxy-lifetime bounds the proxies it admits: 7 days by
// default, the reason named.
func TestMaxProxyLifetime(t *testing.T) {
	dir := t.TempDir()
	g := pkitest.New(t, "testgrid")
	g.WriteGrid(t, dir)
	long, err := proxy.New(g.User(t, "alice"), proxy.Options{Lifetime: 10 * 24 * time.Hour, MaxLifetime: -1})
	if err != nil {
		t.Fatal(err)
	}
	key, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	files := pkitest.WriteCreds(t, dir, "n1", key, []*x509.Certificate{g.Cert(t, ca.Node, "n1", key, time.Time{}, 0)})
	for _, tc := range []struct {
		max time.Duration
		ok  bool
	}{{chain.DefaultMaxProxyLifetime, false}, {30 * 24 * time.Hour, true}} {
		sf := secFlags{caFile: filepath.Join(dir, "ca.pem"), crlFile: filepath.Join(dir, "crl.pem"), certFile: files.Cert, maxProxyLife: tc.max}
		_, trust, err := sf.credentials(key)
		if err != nil {
			t.Fatal(err)
		}
		_, verr := trust.VerifyCertificates(long.Chain)
		switch {
		case tc.ok && verr != nil:
			t.Errorf("--max-proxy-lifetime %v: a 10-day proxy refused: %v", tc.max, verr)
		case !tc.ok && (!errors.Is(verr, chain.ErrLifetime) || !strings.Contains(verr.Error(), "longer than the 168h0m0s a proxy may be")):
			t.Errorf("--max-proxy-lifetime %v: a 10-day proxy: %v; want refused as too long", tc.max, verr)
		}
	}
}
