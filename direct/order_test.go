package direct

import (
	"net/netip"
	"strings"
	"testing"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func addrPorts(ss ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range ss {
		out = append(out, netip.MustParseAddrPort(s))
	}
	return out
}

func joinAP(aps []netip.AddrPort) string {
	var ss []string
	for _, ap := range aps {
		ss = append(ss, ap.String())
	}
	return strings.Join(ss, " ")
}

func TestOrder(t *testing.T) {
	// grid6 hosts' interfaces.
	das3dN1 := prefixes("127.0.0.1/8", "192.0.2.41/27", "10.1.0.11/24")
	das3vN1 := prefixes("127.0.0.1/8", "192.0.2.11/27", "10.1.0.11/24", "10.2.0.11/24")
	das3vN2 := addrPorts("192.0.2.12:7000", "10.1.0.12:7000", "10.2.0.12:7000")
	for _, c := range []struct {
		name             string
		local, preferred []netip.Prefix
		target           []netip.AddrPort
		want             string
	}{
		{
			name:   "das3d->das3v: both on 10.1.0.0/24, private first, then public, then the other private",
			local:  das3dN1,
			target: das3vN2,
			want:   "10.1.0.12:7000 192.0.2.12:7000 10.2.0.12:7000",
		},
		{
			name:   "same site: both private networks shared, target order kept",
			local:  das3vN1,
			target: das3vN2,
			want:   "10.1.0.12:7000 10.2.0.12:7000 192.0.2.12:7000",
		},
		{
			name:   "public-only source: public first",
			local:  prefixes("127.0.0.1/8", "198.51.100.7/24"),
			target: addrPorts("10.1.0.12:7000", "192.0.2.12:7000"),
			want:   "192.0.2.12:7000 10.1.0.12:7000",
		},
		{
			name:   "different private ranges: public first",
			local:  prefixes("10.0.0.10/24", "198.51.100.7/24"),
			target: addrPorts("192.168.1.20:7000", "192.0.2.12:7000"),
			want:   "192.0.2.12:7000 192.168.1.20:7000",
		},
		{
			name:   "a private range that only overlaps by address, not by our prefix",
			local:  prefixes("10.1.0.11/24"),
			target: addrPorts("10.1.1.12:7000", "192.0.2.12:7000"),
			want:   "192.0.2.12:7000 10.1.1.12:7000",
		},
		{
			name:      "preferred first (the fast network), in the order given",
			local:     das3vN1,
			preferred: prefixes("10.2.0.0/24", "192.0.2.0/24"),
			target:    das3vN2,
			want:      "10.2.0.12:7000 192.0.2.12:7000 10.1.0.12:7000",
		},
		{
			name:      "preferred beats same network even when we are not on it",
			local:     das3dN1,
			preferred: prefixes("10.2.0.0/16"),
			target:    das3vN2,
			want:      "10.2.0.12:7000 10.1.0.12:7000 192.0.2.12:7000",
		},
		{
			name:   "NATed target: observed public address before its private one",
			local:  das3vN1,
			target: addrPorts("10.5.0.11:7000", "192.0.2.129:40001"),
			want:   "192.0.2.129:40001 10.5.0.11:7000",
		},
		{
			name:   "duplicates, port 0, unspecified, multicast dropped; mapped unmapped",
			local:  das3vN1,
			target: addrPorts("192.0.2.12:7000", "[::ffff:192.0.2.12]:7000", "10.1.0.12:0", "0.0.0.0:7000", "224.0.0.1:7000", "[::ffff:10.1.0.12]:7000"),
			want:   "10.1.0.12:7000 192.0.2.12:7000",
		},
		{
			name:   "shared address space and link-local count as private",
			local:  prefixes("192.0.2.11/27"),
			target: addrPorts("100.64.1.1:1", "169.254.3.3:1", "192.0.2.12:1"),
			want:   "192.0.2.12:1 100.64.1.1:1 169.254.3.3:1",
		},
		{
			name:   "IPv6: unique-local in our prefix first, then global",
			local:  prefixes("fd00:1::5/64", "2001:db8::5/64"),
			target: addrPorts("[2001:db8::9]:1", "[fd00:1::9]:1", "[fd00:2::9]:1"),
			want:   "[fd00:1::9]:1 [2001:db8::9]:1 [fd00:2::9]:1",
		},
		{
			name:   "loopback: same network only if we have loopback",
			local:  prefixes("127.0.0.1/8", "192.0.2.11/27"),
			target: addrPorts("192.0.2.12:1", "127.0.0.1:1"),
			want:   "127.0.0.1:1 192.0.2.12:1",
		},
		{
			name:   "no local information: public, then private in target order",
			target: addrPorts("10.1.0.12:1", "192.0.2.12:1", "127.0.0.2:1"),
			want:   "192.0.2.12:1 10.1.0.12:1 127.0.0.2:1",
		},
		{name: "nothing", local: das3vN1, want: ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := joinAP(Order(c.local, c.preferred, c.target)); got != c.want {
				t.Errorf("Order =\n  %s\nwant\n  %s", got, c.want)
			}
		})
	}
}

func TestMachineAddrs(t *testing.T) {
	local := prefixes("127.0.0.1/8", "::1/128", "192.0.2.12/27", "169.254.1.1/16", "10.1.0.12/24", "fe80::1/64", "10.1.0.12/24")
	if got := joinAP(machineAddrs(local, 7000)); got != "192.0.2.12:7000 10.1.0.12:7000" {
		t.Errorf("machineAddrs = %s", got)
	}
	if got := joinAP(machineAddrs(prefixes("127.0.0.1/8", "::1/128"), 7000)); got != "127.0.0.1:7000" {
		t.Errorf("loopback only: %s", got)
	}
}

func TestListenerMachine(t *testing.T) {
	c := testCreds(t, 1)
	l := testListen(t, ListenConfig{Creds: c, Addr: "0.0.0.0", Local: func() []netip.Prefix {
		return prefixes("127.0.0.1/8", "192.0.2.12/27", "10.1.0.12/24")
	}})
	m := l.Machine(c.Key.ID(), "das3v-n2")
	port := l.Port()
	if m.ID != c.Key.ID() || m.Name != "das3v-n2" || joinAP(m.Addrs) != joinAP([]netip.AddrPort{
		netip.AddrPortFrom(netip.MustParseAddr("192.0.2.12"), port), netip.AddrPortFrom(netip.MustParseAddr("10.1.0.12"), port)}) {
		t.Errorf("Machine = %+v (port %d)", m, port)
	}
	one := testListen(t, ListenConfig{Creds: c, Addr: "127.0.0.3"})
	if got := one.Machine(c.Key.ID(), "x").Addrs; len(got) != 1 || got[0] != addrOf(one) {
		t.Errorf("bound to one address: %v", got)
	}
	// The default reads this host's interfaces.
	ps, err := LocalPrefixes()
	if err != nil || len(ps) == 0 {
		t.Fatalf("LocalPrefixes: %v, %v", ps, err)
	}
}
