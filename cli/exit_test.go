package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gridlink/gridlink"
)

// gridlink node's exit flags: --exit-allow adds up (also from a config
// file, where it repeats), a bad rule is refused in words naming it, and
// the exit flags need --allow-exit.
func TestExitFlags(t *testing.T) {
	parse := func(file string, args ...string) (gridlink.AgentConfig, error) {
		var ac gridlink.AgentConfig
		var ef exitFlags
		c := nodeCmd()
		c.ResetFlags()
		ef.add(c)
		if err := c.ParseFlags(args); err != nil {
			return ac, err
		}
		if file != "" {
			if err := applyConfigFile(c.Flags(), file); err != nil {
				return ac, err
			}
		}
		return ac, ef.config(c, &ac)
	}
	ac, err := parse("", "--allow-exit")
	if err != nil || !ac.AllowExit || len(ac.ExitAllow) != 0 || ac.ExitPerMember != gridlink.DefaultExitPerMember {
		t.Fatalf("--allow-exit: %+v, %v", ac, err)
	}
	file := filepath.Join(t.TempDir(), "node.conf")
	if err := os.WriteFile(file, []byte("allow-exit\nexit-allow 192.168.0.0/16:22\nexit-allow fd00::/8\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ac, err = parse(file, "--exit-allow", "10.1.0.0/16:80,443,8000-9000", "--exit-per-member", "8")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range ac.ExitAllow {
		got = append(got, r.String())
	}
	// the command line's --exit-allow wins over the file's
	if strings.Join(got, " ") != "10.1.0.0/16:80,443,8000-9000" || ac.ExitPerMember != 8 || !ac.AllowExit {
		t.Errorf("exit config %v, per member %d", got, ac.ExitPerMember)
	}
	ac, err = parse(file)
	got = got[:0]
	for _, r := range ac.ExitAllow {
		got = append(got, r.String())
	}
	if err != nil || strings.Join(got, " ") != "192.168.0.0/16:22 fd00::/8" {
		t.Errorf("exit rules from a config file: %v, %v", got, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--exit-allow", "10.0.0.0/8"}, "--exit-allow needs --allow-exit"},
		{[]string{"--exit-per-member", "3"}, "--exit-per-member needs --allow-exit"},
		{[]string{"--allow-exit", "--exit-per-member", "0"}, "--exit-per-member 0: want 1 or more"},
		{[]string{"--allow-exit", "--exit-allow", "127.0.0.0/8"}, `exit rule "127.0.0.0/8": 127.0.0.0/8 is loopback of the exit host, which an exit refuses whatever --exit-allow lists`},
		{[]string{"--allow-exit", "--exit-allow", "10.0.0.0/8:http"}, `exit rule "10.0.0.0/8:http": port "http" is not a port 1-65535 or a range LOW-HIGH`},
	} {
		_, err := parse("", c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	if _, err := gridlink.ParseExitRule("10.0.0.0/8:0"); !errors.Is(err, gridlink.ErrBadExitRule) {
		t.Errorf("a bad rule: %v, want ErrBadExitRule", err)
	}
}
