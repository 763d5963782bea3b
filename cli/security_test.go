package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

// The API's refusals of a set of credential files come out in the
// flags' words, before anything listens.
func TestCredentialFlagWords(t *testing.T) {
	dir := t.TempDir()
	g := pkitest.New(t, "testgrid")
	g.WriteGrid(t, dir)
	caFile, crlFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "crl.pem")
	some := filepath.Join(dir, "some.pem")
	// A trust directory as grid hosts keep one: the CA under a hashed name.
	trustDir := t.TempDir()
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(trustDir, "0123abcd.0"), caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"hub", "--name", "h", "--listen", "127.0.0.1:0", "--control", "@gridlink-test-words"}, {"perf", "--serve"}} {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--crl", crlFile}, "--crl needs --ca or --ca-dir (the CA certificates)"},
			{[]string{"--cert", some}, "--cert and --proxy need --ca or --ca-dir (the CA certificates)"},
			{[]string{"--proxy", some}, "--cert and --proxy need --ca or --ca-dir (the CA certificates)"},
			{[]string{"--ca", caFile, "--crl", crlFile}, "--ca needs --cert (with --key) or --proxy: this end's certificate"},
			{[]string{"--ca", caFile, "--crl", crlFile, "--cert", some, "--proxy", some}, "--proxy and --cert exclude each other: a proxy carries its chain"},
			{[]string{"--ca-dir", trustDir}, "--ca needs --cert (with --key) or --proxy: this end's certificate"},
			{[]string{"--ca", trustDir, "--crl", crlFile}, "--ca needs --cert (with --key) or --proxy: this end's certificate"},
			{[]string{"--ca-dir", dir}, "pki: trust directory " + dir + " holds no CA certificate (HASH.0 files)"},
		} {
			args := append(append([]string(nil), cmd...), tc.args...)
			if err := run(args...); err == nil || err.Error() != tc.want {
				t.Errorf("%v: %v; want %q", args, err, tc.want)
			}
		}
	}
}

// serve's help says plainly what the service lets every client it
// admits do, and who that is without --allow.
func TestServeHelpSaysWhoOverwrites(t *testing.T) {
	c, _, err := Root().Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Join(strings.Fields(c.Long), " ")
	for _, w := range []string{"may read every file below DIR and overwrite any of them", "no per-user permissions",
		"Without --allow or --allow-group that is every member of the grid", "control characters are neither stored nor sent"} {
		if !strings.Contains(long, w) {
			t.Errorf("serve's help does not say %q", w)
		}
	}
}
