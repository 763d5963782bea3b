package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// --resume-timeout of nc, forward and socks: 30 s by default, the limit
// asked for, 0 for links that are not resumable.
func TestResumeTimeoutFlag(t *testing.T) {
	for args, want := range map[string]float64{
		"":                       30,
		"--resume-timeout 2s":    2,
		"--resume-timeout 1m30s": 90,
		"--resume-timeout 0":     -1,
	} {
		var lf linkFlags
		c := &cobra.Command{Use: "x"}
		lf.add(c)
		if err := c.ParseFlags(strings.Fields(args)); err != nil {
			t.Fatal(err)
		}
		o, err := lf.options()
		if err != nil || o.ResumeSeconds != want {
			t.Errorf("%q: resume %v s (%v), want %v", args, o.ResumeSeconds, err, want)
		}
	}
	if serverResume(0) >= 0 || serverResume(5*time.Second) != 5*time.Second {
		t.Errorf("a service's --resume-timeout 0 must refuse resumable links, 5s allow them for 5 s: %v, %v", serverResume(0), serverResume(5*time.Second))
	}
}

// --upgrade of nc, forward, socks, cp and perf: on by default (issue 20's
// live path upgrade), --upgrade=false turns it off.
func TestUpgradeFlagDefault(t *testing.T) {
	for args, want := range map[string]bool{"": true, "--upgrade": true, "--upgrade=false": false} {
		var lf linkFlags
		c := &cobra.Command{Use: "x"}
		lf.add(c)
		if err := c.ParseFlags(strings.Fields(args)); err != nil {
			t.Fatal(err)
		}
		o, err := lf.options()
		if err != nil || o.Upgrade != want {
			t.Errorf("nc %q: upgrade %v (%v), want %v", args, o.Upgrade, err, want)
		}
		for _, cmd := range []*cobra.Command{cpCmd(), perfCmd()} {
			if err := cmd.ParseFlags(strings.Fields(args)); err != nil {
				t.Fatal(err)
			}
			if got, err := cmd.Flags().GetBool("upgrade"); err != nil || got != want {
				t.Errorf("%s %q: --upgrade %v (%v), want %v", cmd.Name(), args, got, err, want)
			}
		}
	}
}
