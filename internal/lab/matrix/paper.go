package matrix

import (
	"bufio"
	_ "embed"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gridlink/gridlink/internal/lab/topology"
)

// SmartSockets' Table 3 (table3.tsv, with its source): the setup time of
// every ordered pair of grid6's sites, cached, as the paper measured it.

//go:embed table3.tsv
var table3TSV string

// PaperSetup is one pair of the paper's Table 3.
type PaperSetup struct {
	Src, Dst string
	MS       float64 // SmartSockets' setup time, cached
	Style    string  // d direct, r reverse, s splice, v routed
	PlainMS  float64 // regular sockets' time, where they connected (else 0)
}

// Table3 is the paper's Table 3 by "SRC->DST".
func Table3() (map[string]PaperSetup, error) {
	out := map[string]PaperSetup{}
	sc := bufio.NewScanner(strings.NewReader(table3TSV))
	for line := 1; sc.Scan(); line++ {
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		f := strings.Split(t, "\t")
		if len(f) != 5 {
			return nil, fmt.Errorf("table3.tsv:%d: %d fields, want 5", line, len(f))
		}
		ms, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			return nil, fmt.Errorf("table3.tsv:%d: %w", line, err)
		}
		p := PaperSetup{Src: f[0], Dst: f[1], MS: ms, Style: f[3]}
		if f[4] != "-" {
			if p.PlainMS, err = strconv.ParseFloat(f[4], 64); err != nil {
				return nil, fmt.Errorf("table3.tsv:%d: %w", line, err)
			}
		}
		out[p.Src+"->"+p.Dst] = p
	}
	return out, sc.Err()
}

// PaperRow is one pair measured beside the paper: gridlink's time to a
// usable connection (the dialler may send its first byte) uncached and
// cached, against the issue-24 bounds: uncached ≤ 3 network round trips
// + 100 ms, cached ≤ max(Table 3, one echo round trip + 5 ms).
type PaperRow struct {
	Src, Dst    string
	NetRTTMS    float64 // the emulated link's round trip
	Method      string  // of the uncached connection
	FirstMS     float64
	FirstMaxMS  float64
	Cached      string  // the method of the cached connections: what carries the data
	CachedMS    float64 // median
	CachedMaxMS float64
	RTTMS       float64 // median echo round trip
	Paper       PaperSetup
	OK          bool
}

// Paper sets every measured pair of m beside Table 3; a pair the table
// does not have (another topology) has a zero Paper and no cached bound
// but the echo round trip's.
func Paper(m *Matrix, t *topology.Topology) ([]PaperRow, error) {
	t3, err := Table3()
	if err != nil {
		return nil, err
	}
	var out []PaperRow
	for _, p := range m.Pairs {
		r := PaperRow{Src: p.Src, Dst: p.Dst, Paper: t3[p.Src+"->"+p.Dst]}
		if l := t.LinkFor(p.Src, p.Dst); l != nil {
			r.NetRTTMS = float64(2*l.Delay.Microseconds()) / 1000
		}
		r.FirstMaxMS = 3*r.NetRTTMS + 100
		if g := p.Gridlink; g != nil && g.OK {
			r.Method, r.FirstMS, r.Cached, r.CachedMS, r.RTTMS = g.Method, g.FirstMS, g.Cached, g.CachedMS, g.RTTMS
			r.CachedMaxMS = max(r.Paper.MS, r.RTTMS+5)
			r.OK = r.FirstMS <= r.FirstMaxMS && r.CachedMS <= r.CachedMaxMS
		}
		out = append(out, r)
	}
	return out, nil
}

// WritePaper prints the rows as a table and a count of pairs within.
func WritePaper(w io.Writer, rows []PaperRow) {
	letter := map[string]string{"direct": "d", "reverse": "r", "splice": "s", "routed": "v", "mixed": "?"}
	fmt.Fprintf(w, "%-18s %7s %9s %9s %9s %9s %7s %9s %7s %s\n", "pair", "rtt", "uncached", "≤", "cached", "≤", "echo", "Table 3", "path", "")
	ok := 0
	for _, r := range rows {
		mark := "ok"
		if !r.OK {
			mark = "OVER"
		} else {
			ok++
		}
		paper := "-"
		if r.Paper.MS > 0 {
			paper = fmt.Sprintf("%g %s", r.Paper.MS, r.Paper.Style)
		}
		fmt.Fprintf(w, "%-18s %7.1f %7.1f %s %9.1f %7.1f %s %9.1f %7.1f %9s %7s %s\n", r.Src+"->"+r.Dst, r.NetRTTMS,
			r.FirstMS, letterOr(letter, r.Method), r.FirstMaxMS, r.CachedMS, letterOr(letter, r.Cached), r.CachedMaxMS, r.RTTMS, paper, r.Cached, mark)
	}
	fmt.Fprintf(w, "%d of %d pairs within: uncached ≤ 3 RTT + 100 ms, cached ≤ max(Table 3, echo RTT + 5 ms) (times in ms; path: the method of the cached connections, which carries their data from the first byte)\n", ok, len(rows))
}

func letterOr(letters map[string]string, m string) string {
	if l, ok := letters[m]; ok {
		return l
	}
	return "-"
}
