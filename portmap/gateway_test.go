package portmap

import (
	"errors"
	"strings"
	"testing"
)

func TestParseRoutes(t *testing.T) {
	const head = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
	for _, c := range []struct{ table, want string }{
		// a lab host: default via 192.168.15.1, and its LAN.
		{head + "lan\t00000000\t010FA8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\nlan\t000FA8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n", "192.168.15.1"},
		// two defaults: the lower metric wins.
		{head + "a\t00000000\t0100000A\t0003\t0\t0\t200\t00000000\t0\t0\t0\nb\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n", "192.168.1.1"},
		// a default route down, or without a gateway (a device route): none.
		{head + "a\t00000000\t0100000A\t0002\t0\t0\t0\t00000000\t0\t0\t0\nwan0\t00000000\t00000000\t0001\t0\t0\t0\t00000000\t0\t0\t0\n", ""},
		{head, ""},
		{"", ""},
		{head + "garbage\n\t\t\nlan\tzz\t010FA8C0\t0003\t0\t0\t0\t00000000\n", ""},
	} {
		got, err := parseRoutes(strings.NewReader(c.table))
		if c.want == "" {
			if !errors.Is(err, ErrNoDefaultRoute) {
				t.Errorf("parseRoutes(%q) = %v, %v; want ErrNoDefaultRoute", c.table, got, err)
			}
			continue
		}
		if err != nil || got.String() != c.want {
			t.Errorf("parseRoutes(%q) = %v, %v; want %s", c.table, got, err, c.want)
		}
	}
}
