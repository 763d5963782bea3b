package control

import "testing"

func TestUserControlPath(t *testing.T) {
	if got := userControl(1000, "/run/user/1000", "/tmp"); got != "/run/user/1000/gridlink/agent.sock" {
		t.Errorf("with XDG_RUNTIME_DIR: %s", got)
	}
	if got := userControl(1000, "", "/tmp"); got != "/tmp/gridlink-1000/agent.sock" {
		t.Errorf("without: %s", got)
	}
	if got := userControl(1000, "relative", "/tmp"); got != "/tmp/gridlink-1000/agent.sock" {
		t.Errorf("relative XDG_RUNTIME_DIR: %s", got)
	}
}
