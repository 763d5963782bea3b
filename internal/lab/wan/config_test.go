package wan

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func ports(names ...string) []Port {
	var out []Port
	for i, n := range names {
		out = append(out, Port{
			Name:     n,
			NetNS:    "/run/netns/gl-" + n + "-gw",
			Dev:      "wan0",
			Prefixes: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(i + 1)}), 32)},
		})
	}
	return out
}

func TestValidateResolvesLinks(t *testing.T) {
	cfg := Config{
		Ports: ports("a", "b", "c"),
		Links: []Link{
			{A: "b", B: "a", Delay: 5 * time.Millisecond, Rate: 1e6},
			{A: Any, B: Any, Delay: 20 * time.Millisecond},
		},
	}
	links, err := cfg.validate()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		i, j  int
		delay time.Duration
		rate  int64
	}{
		{0, 1, 5 * time.Millisecond, 1e6},
		{1, 0, 5 * time.Millisecond, 1e6}, // both directions
		{0, 2, 20 * time.Millisecond, 0},
		{2, 1, 20 * time.Millisecond, 0},
	} {
		l := links[tc.i][tc.j]
		if l.Delay != tc.delay || l.Rate != tc.rate {
			t.Errorf("link %d->%d = %+v, want delay %v rate %d", tc.i, tc.j, l, tc.delay, tc.rate)
		}
	}
	if l := links[0][2]; l.A != "a" || l.B != "c" {
		t.Errorf("default link not named after its pair: %+v", l)
	}

	// Without a default, unlisted pairs get a perfect link.
	cfg.Links = cfg.Links[:1]
	links, err = cfg.validate()
	if err != nil {
		t.Fatal(err)
	}
	if l := links[2][0]; l.Delay != 0 || l.Rate != 0 || l.Loss != 0 {
		t.Errorf("unlisted pair without default: %+v", l)
	}
}

func TestValidateErrors(t *testing.T) {
	dupPrefix := ports("a", "b")
	dupPrefix[1].Prefixes = dupPrefix[0].Prefixes
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "no ports"},
		{Config{Ports: append(ports("a"), ports("a")...)}, `port "a" defined twice`},
		{Config{Ports: []Port{{Name: "a", Prefixes: ports("a")[0].Prefixes}}}, `port "a": no device`},
		{Config{Ports: []Port{{Name: "a", Dev: "wan0"}}}, `port "a": no prefixes`},
		{Config{Ports: dupPrefix}, `already owned by port "a"`},
		{Config{Ports: ports("a", "b"), Links: []Link{{A: "a", B: "x"}}}, `no port named "x"`},
		{Config{Ports: ports("a", "b"), Links: []Link{{A: "a", B: "a"}}}, "cannot link to itself"},
		{Config{Ports: ports("a", "b"), Links: []Link{{A: "a", B: "b"}, {A: "b", B: "a"}}}, "pair listed twice"},
		{Config{Ports: ports("a", "b"), Links: []Link{{A: "a", B: Any}}}, "needs"},
		{Config{Ports: ports("a", "b"), Links: []Link{{A: Any, B: Any}, {A: Any, B: Any}}}, "more than one default"},
		{Config{Ports: ports("a", "b"), Links: []Link{{A: "a", B: "b", Loss: 1.5}}}, "loss 1.5 outside 0..1"},
		{Config{Ports: ports("a", "b"), Links: []Link{{A: "a", B: "b", Delay: -1}}}, "negative delay"},
		{Config{Ports: ports("a", "b"), Links: []Link{{A: "a", B: "b", Rate: -1}}}, "negative rate"},
	} {
		_, err := tc.cfg.validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("validate(%+v) = %v, want error containing %q", tc.cfg, err, tc.want)
		}
	}
}

func TestRouteLongestPrefix(t *testing.T) {
	p := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	rt := newRouteTable([]Port{
		{Name: "wide", Prefixes: []netip.Prefix{p("198.51.100.0/24")}},
		{Name: "narrow", Prefixes: []netip.Prefix{p("198.51.100.64/26"), p("203.0.113.7/32")}},
		{Name: "v6", Prefixes: []netip.Prefix{p("2001:db8::/32")}},
	})
	for _, tc := range []struct {
		dst  string
		want int32
	}{
		{"198.51.100.1", 0},
		{"198.51.100.64", 1},
		{"198.51.100.127", 1},
		{"198.51.100.128", 0},
		{"203.0.113.7", 1},
		{"203.0.113.8", -1},
		{"192.0.2.1", -1},
		{"2001:db8::1", 2},
		{"2001:db9::1", -1},
	} {
		if got := rt.lookup(ipPacket(netip.MustParseAddr(tc.dst))); got != tc.want {
			t.Errorf("lookup(%s) = %d, want %d", tc.dst, got, tc.want)
		}
	}
	for _, junk := range [][]byte{nil, {0x45}, make([]byte, 19), {0x15, 0, 0, 20}, make([]byte, 39)} {
		if got := rt.lookup(junk); got != -1 {
			t.Errorf("lookup(% x) = %d, want -1", junk, got)
		}
	}
}

// ipPacket returns a minimal IP header addressed to dst.
func ipPacket(dst netip.Addr) []byte {
	if dst.Is4() {
		b := make([]byte, 20)
		b[0] = 0x45
		a := dst.As4()
		copy(b[16:], a[:])
		return b
	}
	b := make([]byte, 40)
	b[0] = 0x60
	a := dst.As16()
	copy(b[24:], a[:])
	return b
}
