package cli

import (
	"strings"
	"testing"

	"github.com/gridlink/gridlink"
)

// gridlink node's --vip flags: off by default, defaults filled in with
// --vip, bad values and --vip-* without --vip refused in words.
func TestVIPFlags(t *testing.T) {
	parse := func(args ...string) (gridlink.VIPConfig, error) {
		c := nodeCmd()
		var vf vipFlags
		c.ResetFlags()
		vf.add(c)
		if err := c.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		return vf.config(c)
	}
	if vc, err := parse(); err != nil || vc.On {
		t.Fatalf("no flags: %+v, %v", vc, err)
	}
	vc, err := parse("--vip")
	if err != nil || !vc.On || vc.Prefix4 != gridlink.DefaultVIPPrefix4 || vc.Prefix6 != gridlink.DefaultVIPPrefix6 || vc.Device != "gridlink0" || vc.MTU != gridlink.DefaultVIPMTU {
		t.Fatalf("--vip: %+v, %v", vc, err)
	}
	vc, err = parse("--vip", "--vip-prefix4", "10.99.0.0/16", "--vip-prefix6", "fd00:1::/48", "--vip-dev", "gl1", "--vip-mtu", "1420")
	if err != nil || vc.Prefix4.String() != "10.99.0.0/16" || vc.Prefix6.String() != "fd00:1::/48" || vc.Device != "gl1" || vc.MTU != 1420 {
		t.Fatalf("all flags: %+v, %v", vc, err)
	}
	for args, want := range map[string]string{
		"--vip-dev x":                    "--vip-dev needs --vip",
		"--vip --vip-prefix4 fd00::/8":   "--vip-prefix4",
		"--vip --vip-prefix6 10.0.0.0/8": "--vip-prefix6",
		"--vip --vip-mtu 100":            "--vip-mtu 100",
		"--vip --vip-mtu 70000":          "--vip-mtu 70000",
	} {
		if _, err := parse(strings.Fields(args)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", args, err, want)
		}
	}
}
