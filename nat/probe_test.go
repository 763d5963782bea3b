package nat

import (
	"net/netip"
	"reflect"
	"testing"
)

func TestObservers(t *testing.T) {
	ap := netip.MustParseAddrPort
	hubs := [][]netip.AddrPort{
		{ap("192.168.1.10:7946")},                       // a hub inside our NAT
		{ap("10.0.0.1:7946"), ap("198.51.100.10:7946")}, // a frontend: private and public
		{ap("198.51.100.42:7946"), ap("198.51.100.43:7946")},
		{ap("203.0.113.5:443")},
	}
	if got, want := Observers(hubs, 2), []netip.AddrPort{ap("198.51.100.10:7946"), ap("198.51.100.42:7946")}; !reflect.DeepEqual(got, want) {
		t.Errorf("Observers = %v, want %v (public ones, one per hub)", got, want)
	}
	private := [][]netip.AddrPort{{ap("127.0.0.1:1")}, {ap("10.0.0.1:2")}, {ap("10.0.0.2:3")}}
	if got := Observers(private, 2); len(got) != 2 || got[0] != ap("127.0.0.1:1") {
		t.Errorf("private grid: %v", got)
	}
	if got := Observers(nil, 2); len(got) != 0 {
		t.Errorf("no hubs: %v", got)
	}
	seq := []netip.AddrPort{ap("1.2.3.4:5"), ap("1.2.3.4:6")}
	if len(Aim(seq, true)) != 1 || len(Aim(seq, false)) != 2 {
		t.Error("Aim: a sequential NAT aims at one endpoint, others at all")
	}
}
