package matrix

import (
	"testing"
)

// Table 3 holds every ordered pair of grid6's sites, as the paper prints
// them, and Paper holds each measured pair to its bounds.
func TestTable3(t *testing.T) {
	g := grid6(t)
	t3, err := Table3()
	if err != nil {
		t.Fatal(err)
	}
	if len(t3) != 30 {
		t.Errorf("%d pairs, want 30", len(t3))
	}
	for _, s := range g.Sites {
		for _, d := range g.Sites {
			if s != d {
				if _, ok := t3[s.Name+"->"+d.Name]; !ok {
					t.Errorf("no %s->%s", s.Name, d.Name)
				}
			}
		}
	}
	// spot checks against the paper (sources are its columns, targets its rows)
	for key, want := range map[string]PaperSetup{
		"das3v->rockstar":   {MS: 500, Style: "r"},
		"desktop->rockstar": {MS: 182, Style: "v"},
		"rockstar->desktop": {MS: 183, Style: "v"},
		"hiroshi->rockstar": {MS: 718, Style: "v"},
		"desktop->das3v":    {MS: 33, Style: "d", PlainMS: 17},
	} {
		if got := t3[key]; got.MS != want.MS || got.Style != want.Style || got.PlainMS != want.PlainMS {
			t.Errorf("%s: %+v, want %+v", key, got, want)
		}
	}

	m := &Matrix{Pairs: []Pair{
		{Src: "desktop", Dst: "rockstar", Gridlink: &GridlinkResult{OK: true, Method: "splice", FirstMS: 150, Cached: "splice", CachedMS: 196, RTTMS: 192.5}},
		{Src: "das3v", Dst: "hiroshi", Gridlink: &GridlinkResult{OK: true, Method: "routed", FirstMS: 200, Cached: "routed", CachedMS: 562, RTTMS: 529}},
		{Src: "das3v", Dst: "das3d"},
	}}
	rows, err := Paper(m, g)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		ok                 bool
		firstMax, cacheMax float64
	}{
		{true, 3*19.25 + 100, 197.5}, // grid6 at its default factor 0.1: rtt 19.25
		{true, 3*52.8 + 100, 630},    // within Table 3's 630
		{false, 3*0.23 + 100, 0},     // no gridlink connection
	} {
		r := rows[i]
		if r.OK != want.ok || !near(r.FirstMaxMS, want.firstMax) || !near(r.CachedMaxMS, want.cacheMax) {
			t.Errorf("%s->%s: ok %v, bounds %.2f %.2f, want %v %.2f %.2f", r.Src, r.Dst, r.OK, r.FirstMaxMS, r.CachedMaxMS, want.ok, want.firstMax, want.cacheMax)
		}
	}
}

func near(a, b float64) bool { return a-b < 0.01 && b-a < 0.01 }
