package exec

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/gridlink/gridlink/vip/dns"
)

// The host forms launchers pass where they would pass them to ssh:
// hostfile names on the virtual network (NODE.grid), USER@HOST, ssh://.
func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in, node, account, addr string
	}{
		{"g5k-n1", "g5k-n1", "", "g5k-n1:512"},
		{"g5k-n1.grid", "g5k-n1", "", "g5k-n1:512"},
		{"g5k-n1.GRID.", "g5k-n1", "", "g5k-n1:512"},
		{"n1@das3v", "n1@das3v", "", "n1:512@das3v"},
		{"alice@g5k-n1.grid", "g5k-n1", "alice", "g5k-n1:512"},
		{"alice@n1@das3v", "n1@das3v", "alice", "n1:512@das3v"},
		{"alice@n1.grid@das3v", "n1@das3v", "alice", "n1:512@das3v"},
		{"ssh://alice@g5k-n1:22", "g5k-n1", "alice", "g5k-n1:512"},
		{"ssh://g5k-n1.grid/", "g5k-n1", "", "g5k-n1:512"},
		{"ssh://bob@hiroshi-n1", "hiroshi-n1", "bob", "hiroshi-n1:512"},
		{"my.host", "my.host", "", "my.host:512"},
		{"grid", "grid", "", "grid:512"}, // a node named like the zone
	} {
		got, err := ParseTarget(tc.in)
		if err != nil || got.Node != tc.node || got.Account != tc.account || dialAddr(got.Node) != tc.addr {
			t.Errorf("%q: %+v %v (%s); want node %q account %q (%s)", tc.in, got, err, dialAddr(got.Node), tc.node, tc.account, tc.addr)
		}
	}
	for _, bad := range []string{"", "@", ".grid", "a@b@c@d", "../root@n1.grid", "n1@", "ssh://n1:0", "ssh://n1:x", "n1:22", "a/b", "ssh://@n1"} {
		got, err := ParseTarget(bad)
		var te *TargetError
		if !errors.As(err, &te) {
			t.Errorf("%q accepted: %+v (%v)", bad, got, err)
		}
	}
}

// A virtual IP address in a hostfile is the node the virtual network's
// name server names for it (PTR), asked as the host's resolver would.
func TestTargetResolve(t *testing.T) {
	held := netip.MustParseAddr("100.96.3.4")
	srv, err := dns.New(dns.Config{
		Lookup: func(ctx context.Context, name string) ([]netip.Addr, error) { return nil, dns.ErrNotFound },
		LookupAddr: func(ctx context.Context, a netip.Addr) (string, error) {
			if a == held {
				return "g5k-n1", nil
			}
			return "", dns.ErrNotFound
		},
		Prefixes: []netip.Prefix{netip.MustParsePrefix("100.96.0.0/12")},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	pc, l, err := dns.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Serve(ctx, pc, l)
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, pc.LocalAddr().String())
	}}
	for in, want := range map[string]string{"100.96.3.4": "g5k-n1", "alice@100.96.3.4@das3v": "g5k-n1@das3v", "g5k-n2.grid": "g5k-n2"} {
		tg, err := ParseTarget(in)
		if err == nil {
			tg, err = tg.Resolve(ctx, r)
		}
		if err != nil || tg.Node != want {
			t.Errorf("%s: %+v %v; want node %s", in, tg, err, want)
		}
	}
	tg, _ := ParseTarget("100.96.9.9")
	var te *TargetError
	if _, err := tg.Resolve(ctx, r); !errors.As(err, &te) {
		t.Errorf("an address no node holds: %v", err)
	}
}
