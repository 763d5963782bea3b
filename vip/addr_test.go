package vip

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/gridlink/gridlink/identity"
)

func testID(i int) identity.ID {
	var id identity.ID
	id[0], id[1], id[2] = byte(i), byte(i>>8), 0x5a
	return id
}

func TestAddrsStableInsidePrefix(t *testing.T) {
	for i := range 200 {
		id := testID(i)
		v4, v6, err := Addrs(DefaultPrefix4, DefaultPrefix6, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		again4, again6, _ := Addrs(DefaultPrefix4, DefaultPrefix6, id, 0)
		if v4 != again4 || v6 != again6 {
			t.Fatalf("id %d: %s %s, then %s %s", i, v4, v6, again4, again6)
		}
		if !DefaultPrefix4.Contains(v4) || !DefaultPrefix6.Contains(v6) {
			t.Fatalf("id %d: %s, %s outside %s, %s", i, v4, v6, DefaultPrefix4, DefaultPrefix6)
		}
		next4, next6, _ := Addrs(DefaultPrefix4, DefaultPrefix6, id, 1)
		if next4 == v4 || next6 == v6 {
			t.Errorf("id %d: counter 1 gives the same address %s %s", i, next4, next6)
		}
	}
}

func TestAddrSkipsNetworkAndBroadcast(t *testing.T) {
	// A /30 has two usable hosts: .1 and .2; every identity lands on one.
	p := netip.MustParsePrefix("10.1.2.4/30")
	seen := map[netip.Addr]int{}
	for i := range 400 {
		a, err := Addr(p, testID(i), uint32(i%3))
		if err != nil {
			t.Fatal(err)
		}
		seen[a]++
	}
	if len(seen) != 2 || seen[netip.MustParseAddr("10.1.2.5")] == 0 || seen[netip.MustParseAddr("10.1.2.6")] == 0 {
		t.Fatalf("addresses in %s: %v, want 10.1.2.5 and 10.1.2.6 only", p, seen)
	}
	p6 := netip.MustParsePrefix("fd00::/126")
	for i := range 400 {
		a, _ := Addr(p6, testID(i), 0)
		if a == p6.Addr() || a == netip.MustParseAddr("fd00::3") || !p6.Contains(a) {
			t.Fatalf("%s in %s", a, p6)
		}
	}
}

func TestAddrSpread(t *testing.T) {
	// 4096 identities in a /12 (about a million hosts): few collisions
	// (expected about 8), and every sixteenth of the prefix used evenly.
	const n = 4096
	seen := map[netip.Addr]bool{}
	var buckets [16]int
	for i := range n {
		a, _ := Addr(DefaultPrefix4, testID(i), 0)
		seen[a] = true
		b := a.As4()
		buckets[b[1]&0x0f]++
	}
	if n-len(seen) > 40 {
		t.Errorf("%d collisions among %d identities in a /12", n-len(seen), n)
	}
	for i, c := range buckets {
		if c < n/16/2 || c > n/16*2 {
			t.Errorf("sixteenth %d of the prefix holds %d of %d addresses: %v", i, c, n, buckets)
		}
	}
	seen6 := map[netip.Addr]bool{}
	for i := range n {
		a, _ := Addr(DefaultPrefix6, testID(i), 0)
		seen6[a] = true
	}
	if len(seen6) != n {
		t.Errorf("%d IPv6 collisions among %d identities in a /32", n-len(seen6), n)
	}
}

func TestAddrRefusesBadPrefixes(t *testing.T) {
	for _, tc := range []struct {
		p4, p6 string
	}{
		{"10.0.0.1/24", "fd67:726c::/32"}, // host bits set
		{"10.0.0.0/31", "fd67:726c::/32"}, // no host left
		{"fd00::/8", "fd67:726c::/32"},    // not IPv4
		{"10.0.0.0/8", "10.0.0.0/8"},      // not IPv6
		{"10.0.0.0/8", "fd67:726c::/127"}, // no host left
	} {
		_, _, err := Addrs(netip.MustParsePrefix(tc.p4), netip.MustParsePrefix(tc.p6), testID(1), 0)
		var pe *PrefixError
		if !errors.Is(err, ErrBadPrefix) || !errors.As(err, &pe) {
			t.Errorf("Addrs(%s, %s) = %v, want a PrefixError", tc.p4, tc.p6, err)
		}
	}
}
