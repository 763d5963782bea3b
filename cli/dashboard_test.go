package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dashboard --members needs the grid's CA and a certificate of its own;
// proxy init --restrict takes "dashboard" (alone or at a node).
func TestDashboardMembersFlags(t *testing.T) {
	if err := run("dashboard", "--no-browser", "--members", "127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), "--members: members sign on with grid certificates: it needs --ca") {
		t.Errorf("dashboard --members in an open grid: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "missing.pem")
	id := "3qv3ylp4bh5oeakeagmqwfbnzu6xdn7buh5npxn6jjvdqwtgyzqa"
	for _, r := range []string{"dashboard", "dashboard@" + id, "exec,dashboard"} {
		if err := run("proxy", "init", "--cert", missing, "--key", missing, "--hours", "168", "--restrict", r); err == nil || !strings.Contains(err.Error(), "missing.pem") {
			t.Errorf("--restrict %s: %v; want only the missing certificate refused", r, err)
		}
	}
}

// The dashboard's token goes on no command line (every account reads
// those in ps): the browser is started on a private file (0600 in a
// 0700 directory) whose page sends it on to the address with the token,
// and the file goes when the dashboard stops.
func TestBrowserArgvHasNoToken(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "xdg-open"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	t.Setenv("DISPLAY", ":0")
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	var argv []string
	was := startBrowser
	startBrowser = func(a []string) error { argv = a; return nil }
	defer func() { startBrowser = was }()

	const token = "5f0c9e1d2b3a4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5"
	url := "http://127.0.0.1:40213/?token=" + token
	remove := openBrowser(url)
	if len(argv) != 2 || filepath.Base(argv[0]) != "xdg-open" {
		t.Fatalf("started %q; want xdg-open and one argument", argv)
	}
	for _, a := range argv {
		if strings.Contains(a, token) {
			t.Fatalf("the browser's command line holds the token: %q", argv)
		}
	}
	page := argv[1]
	fi, err := os.Stat(page)
	if err != nil {
		t.Fatal(err)
	}
	di, err := os.Stat(filepath.Dir(page))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Errorf("the page is %v in a directory %v; want 0600 in 0700", fi.Mode().Perm(), di.Mode().Perm())
	}
	b, _ := os.ReadFile(page)
	if !strings.Contains(string(b), `http-equiv="refresh" content="0; url=`+url+`"`) {
		t.Errorf("the page does not send the browser on to the address:\n%s", b)
	}
	remove()
	if _, err := os.Stat(filepath.Dir(page)); !os.IsNotExist(err) {
		t.Errorf("the page's directory is left: %v", err)
	}
}
