package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// The systemd units in dist/systemd start commands and flags this
// command line has, and the config files they read (dist/config, as
// installed in /etc/gridlink) parse for those commands.
func TestSystemdUnits(t *testing.T) {
	units, _ := filepath.Glob("../dist/systemd/*.service")
	if len(units) != 2 {
		t.Fatalf("units %v; want gridlink-hub.service and gridlink-node.service", units)
	}
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		var exec []string
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
				exec = strings.Fields(v)
			}
		}
		if len(exec) < 4 || filepath.Base(exec[0]) != "gridlink" || exec[2] != "--config" {
			t.Errorf("%s: ExecStart %q; want gridlink COMMAND --config FILE", u, exec)
			continue
		}
		var cmd *cobra.Command
		for _, c := range Root().Commands() {
			if c.Name() == exec[1] {
				cmd = c
			}
		}
		if cmd == nil {
			t.Errorf("%s: no gridlink %s", u, exec[1])
			continue
		}
		conf := filepath.Join("../dist/config", strings.TrimPrefix(exec[3], "/etc/gridlink/"))
		if err := cmd.ParseFlags([]string{"--config", conf}); err != nil {
			t.Fatal(err)
		}
		if err := cmd.PreRunE(cmd, nil); err != nil {
			t.Errorf("%s: %s: %v", u, conf, err)
		}
	}
}
