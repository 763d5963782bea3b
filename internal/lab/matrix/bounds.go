package matrix

import (
	"fmt"
	"io"

	"github.com/gridlink/gridlink/internal/lab/topology"
)

// Bound is the connectivity core's setup-time target for one pair, and
// what was measured.
type Bound struct {
	Src, Dst    string
	Method      string
	NetRTTMS    float64 // the emulated link's round trip
	FirstMS     float64
	FirstMaxMS  float64 // 3 network round trips + 100 ms
	CachedMS    float64
	CachedMaxMS float64 // direct: plain TCP setup + 1 RTT; routed: one routed round trip + 5 ms
	OK          bool
}

// Bounds checks every pair's gridlink setup times against the targets:
// uncached within 3 network round trips + 100 ms; cached direct within
// plain TCP + 1 RTT, cached routed within one routed round trip + 5 ms,
// where a round trip is the echo round trip measured on the connection.
// Reverse and splice have no cached target of their own; they are held to
// the uncached bound.
func Bounds(m *Matrix, t *topology.Topology) []Bound {
	var out []Bound
	for _, p := range m.Pairs {
		g := p.Gridlink
		if g == nil || !g.OK {
			out = append(out, Bound{Src: p.Src, Dst: p.Dst})
			continue
		}
		rtt := 0.0
		if l := t.LinkFor(p.Src, p.Dst); l != nil {
			rtt = float64(2*l.Delay.Microseconds()) / 1000
		}
		b := Bound{Src: p.Src, Dst: p.Dst, Method: g.Method, NetRTTMS: rtt, FirstMS: g.FirstMS, CachedMS: g.CachedMS,
			FirstMaxMS: 3*rtt + 100}
		switch g.Cached {
		case "direct":
			// one round trip as measured on this very connection (like the
			// routed bound): the emulator's own per-round-trip overhead
			// then counts on both sides of the comparison.
			b.CachedMaxMS = p.Plain.MS + g.RTTMS
		case "routed":
			b.CachedMaxMS = g.RTTMS + 5
		default:
			b.CachedMaxMS = b.FirstMaxMS
		}
		b.OK = b.FirstMS <= b.FirstMaxMS && b.CachedMS <= b.CachedMaxMS
		out = append(out, b)
	}
	return out
}

// WriteBounds prints the bounds as a table and a count of pairs within.
func WriteBounds(w io.Writer, bs []Bound) {
	fmt.Fprintf(w, "%-20s %-8s %8s %9s %9s %9s %9s  %s\n", "pair", "method", "rtt", "first", "≤", "cached", "≤", "")
	ok := 0
	for _, b := range bs {
		mark := "ok"
		if !b.OK {
			mark = "OVER"
		} else {
			ok++
		}
		fmt.Fprintf(w, "%-20s %-8s %8.1f %9.1f %9.1f %9.1f %9.1f  %s\n", b.Src+"->"+b.Dst, b.Method, b.NetRTTMS, b.FirstMS, b.FirstMaxMS, b.CachedMS, b.CachedMaxMS, mark)
	}
	fmt.Fprintf(w, "%d of %d pairs within their setup-time bounds (times in ms)\n", ok, len(bs))
}
