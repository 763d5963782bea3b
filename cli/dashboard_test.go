package cli

import (
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
