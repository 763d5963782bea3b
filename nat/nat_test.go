package nat

import (
	"fmt"
	"math/rand"
	"net/netip"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

// obs builds observations: local ports and the external ports seen for
// them, in time order, by one observer.
func obs(local []uint16, ext []uint16, extAddr string) []Observation {
	var out []Observation
	for i := range local {
		out = append(out, Observation{
			Local:    netip.AddrPortFrom(netip.MustParseAddr("192.168.1.10"), local[i]),
			External: netip.AddrPortFrom(netip.MustParseAddr(extAddr), ext[i]),
			Observer: "hub1",
			At:       t0.Add(time.Duration(i) * time.Second),
		})
	}
	return out
}

func TestClassify(t *testing.T) {
	cases := []struct {
		name      string
		local     []uint16
		ext       []uint16
		want      Allocation
		wantDelta int
	}{
		{"preserving", []uint16{40001, 40002, 51000}, []uint16{40001, 40002, 51000}, Preserving, 0},
		{"preserving with one clash", []uint16{40001, 40002, 40003, 40004, 40005}, []uint16{40001, 40002, 61234, 40004, 40005}, Preserving, 0},
		{"sequential +1", []uint16{40001, 40100, 45000, 50000}, []uint16{20010, 20011, 20012, 20013}, Sequential, 1},
		{"sequential +2 with gaps", []uint16{1, 2, 3, 4, 5, 6}, []uint16{30000, 30002, 30006, 30008, 30010, 30012}, Sequential, 2},
		{"sequential, counter wraps", []uint16{1, 2, 3, 4, 5}, []uint16{20997, 20998, 20999, 20000, 20001}, Sequential, 1},
		{"sequential, moved on irregularly by other connections", []uint16{1, 2, 3, 4}, []uint16{20019, 20020, 20023, 20025}, Sequential, 1},
		{"sequential +2, moved on irregularly", []uint16{1, 2, 3, 4}, []uint16{20010, 20014, 20016, 20022}, Sequential, 2},
		{"random", []uint16{1, 2, 3, 4, 5}, []uint16{53211, 1401, 33012, 61200, 9044}, Random, 0},
		{"random, two steps small by chance", []uint16{1, 2, 3, 4}, []uint16{30000, 30005, 30011, 52000}, Random, 0},
		{"one observation", []uint16{40001}, []uint16{20010}, Unknown, 0},
	}
	for _, c := range cases {
		got := Classify(obs(c.local, c.ext, "203.0.113.19"))
		if got.Allocation != c.want || got.Delta != c.wantDelta {
			t.Errorf("%s: %v, want %v (delta %d)", c.name, got, c.want, c.wantDelta)
		}
		if c.want != Unknown && got.External != netip.MustParseAddr("203.0.113.19") {
			t.Errorf("%s: external %v", c.name, got.External)
		}
	}
	// An observer that timed out between two observations: across the
	// gap the host's other connections moved the counter on by 20 (seen in
	// nat-zoo); the steps between observations made close together decide.
	gap := func(ext []uint16) []Observation {
		o := obs([]uint16{1, 2, 3, 4}, ext, "203.0.113.19")
		for i, at := range []time.Duration{0, 5020 * time.Millisecond, 5053 * time.Millisecond, 5075 * time.Millisecond} {
			o[i].At = t0.Add(at)
		}
		return o
	}
	if got := Classify(gap([]uint16{20017, 20037, 20040, 20042})); got.Allocation != Sequential || got.Delta != 1 {
		t.Errorf("sequential across a 5 s gap: %v, want sequential +1", got)
	}
	if got := Classify(gap([]uint16{38699, 11308, 31742, 64318})); got.Allocation != Random {
		t.Errorf("random across a 5 s gap: %v, want random", got)
	}
	// no NAT: the observer sees the local address itself.
	pub := obs([]uint16{40001, 40002}, []uint16{40001, 40002}, "192.168.1.10")
	if got := Classify(pub); got.Allocation != None {
		t.Errorf("untranslated: %v", got)
	}
}

func TestMapping(t *testing.T) {
	a := obs([]uint16{40001, 40002}, []uint16{40001, 40002}, "203.0.113.17")
	b := obs([]uint16{40001}, []uint16{40001}, "203.0.113.17")
	b[0].Observer = "hub2"
	if got := Classify(append(a, b...)).Mapping; got != EndpointIndependent {
		t.Errorf("same port toward two observers: %v", got)
	}
	b[0].External = netip.MustParseAddrPort("203.0.113.17:50000")
	if got := Classify(append(a, b...)).Mapping; got != EndpointDependent {
		t.Errorf("another port toward the second observer: %v", got)
	}
}

func TestPredict(t *testing.T) {
	last := obs([]uint16{1}, []uint16{65534}, "203.0.113.19")[0]
	got := Predict(Class{Allocation: Sequential, Delta: 1}, last, 40000, 3)
	if fmt.Sprint(got) != "[65535 1024 1025]" {
		t.Errorf("sequential across the end of the port space: %v", got)
	}
	if got := Predict(Class{Allocation: Preserving}, last, 40000, 3); fmt.Sprint(got) != "[40000]" {
		t.Errorf("preserving: %v", got)
	}
	if got := Predict(Class{Allocation: Random}, last, 40000, 3); got != nil {
		t.Errorf("random: %v", got)
	}
}

// Whatever the observations, classification and prediction neither panic
// nor predict for a class they call unpredictable.
func FuzzClassify(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, int64(1))
	f.Fuzz(func(t *testing.T, b []byte, seed int64) {
		r := rand.New(rand.NewSource(seed))
		var os []Observation
		for i := 0; i+3 < len(b) && i < 64; i += 4 {
			os = append(os, Observation{
				Local:    netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, b[i] % 3}), uint16(b[i+1])<<8|uint16(b[i+2])),
				External: netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, 113, b[i+3] % 2}), uint16(r.Intn(65536))),
				Observer: fmt.Sprint(b[i] % 2),
				At:       t0.Add(time.Duration(r.Intn(1000)) * time.Millisecond),
			})
		}
		c := Classify(os)
		if len(os) > 0 {
			p := Predict(c, os[len(os)-1], 40000, 5)
			if !c.Predictable() && p != nil {
				t.Fatalf("%v predicted %v", c, p)
			}
		}
	})
}
