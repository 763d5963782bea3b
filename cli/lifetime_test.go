package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
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
		{[]string{"proxy", "init", "--cert", missing, "--key", missing, "--restrict", "myweb"}, `--restrict myweb: unknown service "myweb": want echo, exec, or port-N`},
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
