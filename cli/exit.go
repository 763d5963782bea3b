package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gridlink/gridlink"
)

// exitFlags are gridlink node's exit service flags.
type exitFlags struct {
	allow     bool
	rules     []gridlink.ExitRule
	perMember int
}

func (ef *exitFlags) add(c *cobra.Command) {
	c.Flags().BoolVar(&ef.allow, "allow-exit", false, "let other nodes' SOCKS clients reach TCP hosts from here (gridlink socks --exit): public addresses, and private ones only as --exit-allow lists them; never this host's loopback, link-local, unspecified, multicast, broadcast or own addresses. Every exit is logged and counted")
	c.Flags().Var(exitRulesValue{&ef.rules}, "exit-allow", "with --allow-exit, let exits reach the private addresses of `CIDR[:PORTS]` (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7, the virtual prefixes; refused by default), on PORTS only if given, e.g. 10.1.0.0/16:22,80,8000-9000 (repeatable). Loopback, link-local, unspecified, multicast, broadcast and this host's own addresses stay refused whatever it lists")
	c.Flags().IntVar(&ef.perMember, "exit-per-member", gridlink.DefaultExitPerMember, "with --allow-exit, the most exits one member (by certificate subject) may have open at once; more are refused")
}

// config puts the flags into cfg, or says which needs --allow-exit.
func (ef *exitFlags) config(cmd *cobra.Command, cfg *gridlink.AgentConfig) error {
	for _, name := range []string{"exit-allow", "exit-per-member"} {
		if cmd.Flags().Changed(name) && !ef.allow {
			return fmt.Errorf("--%s needs --allow-exit (this node offers no exits without it)", name)
		}
	}
	if ef.perMember < 1 {
		return fmt.Errorf("--exit-per-member %d: want 1 or more", ef.perMember)
	}
	cfg.AllowExit, cfg.ExitAllow, cfg.ExitPerMember = ef.allow, ef.rules, ef.perMember
	return nil
}

// exitRulesValue is --exit-allow: each one adds a rule. Its type ends in
// Array, so a config file may repeat it.
type exitRulesValue struct{ r *[]gridlink.ExitRule }

func (v exitRulesValue) Set(s string) error {
	r, err := gridlink.ParseExitRule(s)
	if err != nil {
		return err
	}
	*v.r = append(*v.r, r)
	return nil
}

func (v exitRulesValue) String() string {
	if v.r == nil {
		return ""
	}
	s := make([]string, len(*v.r))
	for i, r := range *v.r {
		s[i] = r.String()
	}
	return strings.Join(s, " ")
}

func (v exitRulesValue) Type() string { return "exitRuleArray" }
