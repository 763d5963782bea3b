package nat

import (
	"net/netip"
	"slices"
	"testing"
)

// A sequential NAT's guesses cover every port up to one step and then the
// step's multiples: a +1 NAT that the host's concurrent connections made
// look +5 (seen on a hub splicing to four hubs at once, whose links to the
// +1 NAT were then never spliced: the guesses were +5, +10, ... +40) has
// its next ports among them, and so has a true +5 NAT.
func TestSequentialGuesses(t *testing.T) {
	last := Observation{External: netip.MustParseAddrPort("203.0.113.19:20040")}
	for _, c := range []struct {
		delta int
		want  []uint16
	}{
		{1, []uint16{20041, 20042, 20043, 20044, 20045, 20046, 20047, 20048}},
		{3, []uint16{20041, 20042, 20043, 20044, 20045, 20046, 20047, 20048}},
		{4, []uint16{20041, 20042, 20043, 20044, 20045, 20046, 20047, 20048}},
		{5, []uint16{20041, 20042, 20043, 20044, 20045, 20050, 20055, 20060}},
		{8, []uint16{20041, 20042, 20043, 20044, 20048, 20056, 20064, 20072}},
		{12, []uint16{20041, 20042, 20043, 20044, 20052, 20064, 20076, 20088}},
	} {
		if got := sequentialGuesses(c.delta, last, 7946, 8); !slices.Equal(got, c.want) {
			t.Errorf("step %d: guesses %v, want %v", c.delta, got, c.want)
		}
	}
}
