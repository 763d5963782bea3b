package cli

import (
	"errors"
	"os"
	"path/filepath"
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
	if err != nil || !vc.On || vc.Prefix4 != gridlink.DefaultVIPPrefix4 || vc.Prefix6 != gridlink.DefaultVIPPrefix6 || vc.Device != "gridlink0" || vc.MTU != gridlink.DefaultVIPMTU || vc.Carriers != gridlink.DefaultVIPCarriers {
		t.Fatalf("--vip: %+v, %v", vc, err)
	}
	vc, err = parse("--vip", "--vip-prefix4", "10.99.0.0/16", "--vip-prefix6", "fd00:1::/48", "--vip-dev", "gl1", "--vip-mtu", "1420", "--vip-carriers", "1")
	if err != nil || vc.Prefix4.String() != "10.99.0.0/16" || vc.Prefix6.String() != "fd00:1::/48" || vc.Device != "gl1" || vc.MTU != 1420 || vc.Carriers != 1 {
		t.Fatalf("all flags: %+v, %v", vc, err)
	}
	for args, want := range map[string]string{
		"--vip-dev x":                    "--vip-dev needs --vip",
		"--vip --vip-prefix4 fd00::/8":   "--vip-prefix4",
		"--vip --vip-prefix6 10.0.0.0/8": "--vip-prefix6",
		"--vip --vip-mtu 100":            "--vip-mtu 100",
		"--vip --vip-mtu 70000":          "--vip-mtu 70000",
		"--vip --vip-carriers 0":         "--vip-carriers 0",
		"--vip-carriers 4":               "--vip-carriers needs --vip",
		"--vip-zone x":                   "--vip-zone needs --vip",
		"--vip-names=false":              "--vip-names needs --vip",
		"--vip --vip-resolver dnsmasq":   "--vip-resolver",
		"--vip --vip-dns 127.0.0.153":    "--vip-dns",
		"--vip --vip-rules /nonexistent": "--vip-rules",
	} {
		if _, err := parse(strings.Fields(args)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", args, err, want)
		}
	}
}

// gridlink node's names and access-rule flags: names on by default with
// --vip (zone grid, the default server, the resolver picked
// automatically), off with --vip-names=false; --vip-allow adds up, a rules
// file adds to it, and a bad rule is refused naming it.
func TestVIPNameAndRuleFlags(t *testing.T) {
	parse := func(args ...string) (gridlink.VIPConfig, error) {
		c := nodeCmd()
		var vf vipFlags
		c.ResetFlags()
		vf.add(c)
		if err := c.ParseFlags(args); err != nil {
			return gridlink.VIPConfig{}, err
		}
		return vf.config(c)
	}
	vc, err := parse("--vip")
	if err != nil || vc.Names.Off || vc.Names.Zone != "grid" || vc.Names.Addr != gridlink.DefaultNameServer || vc.Names.Resolver != gridlink.ResolverAuto || !vc.Rules.IsZero() {
		t.Fatalf("--vip: names %+v rules %q, %v", vc.Names, vc.Rules.String(), err)
	}
	vc, err = parse("--vip", "--vip-names=false")
	if err != nil || !vc.Names.Off {
		t.Fatalf("--vip-names=false: %+v, %v", vc.Names, err)
	}
	vc, err = parse("--vip", "--vip-zone", "grid.example.org", "--vip-dns", "127.0.0.1:5353", "--vip-resolver", "none")
	if err != nil || vc.Names.Zone != "grid.example.org" || vc.Names.Addr != "127.0.0.1:5353" || vc.Names.Resolver != gridlink.ResolverNone {
		t.Fatalf("names flags: %+v, %v", vc.Names, err)
	}
	file := filepath.Join(t.TempDir(), "rules")
	if err := os.WriteFile(file, []byte("# ssh from the physicists\nallow group:physics tcp/22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	vc, err = parse("--vip", "--vip-allow", "node:das3v-n1 tcp/5201 icmp", "--vip-allow", "allow * udp/53", "--vip-rules", file)
	if err != nil {
		t.Fatal(err)
	}
	want, err := gridlink.ParseVIPRules("allow node:das3v-n1 tcp/5201 icmp; allow * udp/53; allow group:physics tcp/22")
	if err != nil {
		t.Fatal(err)
	}
	if vc.Rules.String() != want.String() {
		t.Errorf("rules:\n%s\nwant\n%s", vc.Rules.String(), want.String())
	}
	if _, err := parse("--vip-allow", "* tcp/22"); err == nil || !strings.Contains(err.Error(), "--vip-allow needs --vip") {
		t.Errorf("--vip-allow without --vip: %v", err)
	}
	if _, err := parse("--vip", "--vip-allow", "nobody:x tcp"); err == nil || !strings.Contains(err.Error(), "nobody:x") {
		t.Errorf("a bad rule: %v, want a refusal naming it", err)
	}
	if err := os.WriteFile(file, []byte("allow * tcp/99999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := parse("--vip", "--vip-rules", file); !errors.Is(err, gridlink.ErrBadVIPRule) || !strings.Contains(err.Error(), file) {
		t.Errorf("a bad rules file: %v, want ErrBadVIPRule naming the file", err)
	}
}
