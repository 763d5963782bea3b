package hubserver

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/gridlink/gridlink/identity"
)

func TestDiscoveryAnswer(t *testing.T) {
	id := identity.KeyFromSeed(make([]byte, 32)).ID()
	src := netip.MustParseAddr("10.4.0.10")
	f, err := parseAnswer(encodeAnswer("g5k", id, 7946), src)
	if err != nil || f.Name != "g5k" || f.ID != id || f.Addr != netip.MustParseAddrPort("10.4.0.10:7946") {
		t.Fatalf("parse: %+v, %v", f, err)
	}
	for in, want := range map[string]string{
		"GRIDLINK-HUB 1 g5k":                       "not an answer",
		"GRIDLINK-HUB 2 g5k " + id.String() + " 1": "not an answer",
		"GRIDLINK-HUB 1 g5k nope 7946":             "bad ID",
		"GRIDLINK-HUB 1 g5k " + id.String() + " 0": "bad port",
		"GRIDLINK-HUB 1 g5k " + id.String() + " x": "bad port",
		discoverQuery: "not an answer",
	} {
		if _, err := parseAnswer([]byte(in), src); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseAnswer(%q): %v, want %q", in, err, want)
		}
	}
}

func FuzzDiscoveryAnswer(f *testing.F) {
	id := identity.KeyFromSeed(make([]byte, 32)).ID()
	f.Add(encodeAnswer("das3v", id, 7946))
	f.Add([]byte(discoverQuery))
	f.Fuzz(func(t *testing.T, b []byte) {
		fd, err := parseAnswer(b, netip.MustParseAddr("192.0.2.1"))
		if err == nil && (fd.Addr.Port() == 0 || fd.ID.IsZero()) {
			t.Fatalf("accepted %q as %+v", b, fd)
		}
	})
}
