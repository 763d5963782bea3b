package lab_test

import (
	"context"
	"testing"
	"time"

	"github.com/gridlink/gridlink/internal/lab/matrix"
)

// An uncached routed setup where every more direct method fails at once
// does not wait out the routed head start (issue 17): from grid6's
// non-routed nodes (g5k-n1, hiroshi-n1: a direct connect fails at once,
// with no route; reverse cannot reach them; splicing cannot predict their
// ports) to every other site, the first connection is set up within one
// routed round trip (the echo round trip measured on it) + 10 ms, the
// bound the issue states. The head start is 50 ms, so today's setups take
// a round trip + 50 ms and more. (TestGrid6Overlay: the first
// measurement of each pair is GridlinkMatrix's, when it ran.)
func (grid *grid6Overlay) routedSetupNoHeadStart(t *testing.T) {
	topo, o := grid.topo, grid.o
	ctx := context.Background()
	for _, from := range []string{"g5k", "hiroshi"} {
		src := topo.Site(from).MatrixHost()
		for _, s := range topo.Sites {
			if s.Name == from {
				continue
			}
			dst := s.MatrixHost()
			// until the hubs have found each other (a few gossip rounds)
			for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				if ok, why := o.Reaches(ctx, src, dst); ok {
					break
				} else if time.Now().After(deadline) {
					t.Fatalf("%s -> %s: %s", src.ID(), dst.ID(), why)
				}
			}
			// a machine loaded by parallel test packages may delay one
			// setup: measure again (and say so) before calling it slow.
			var g matrix.GridlinkResult
			for try := 0; try < 3; try++ {
				if r, ok := grid.pings[from+"->"+s.Name]; ok && try == 0 {
					g = r
				} else {
					g = o.Ping(ctx, src, dst)
				}
				t.Logf("%s -> %s: %s, uncached %.1f ms, cached %.1f ms, routed round trip %.1f ms", src.ID(), dst.ID(), g.Method, g.FirstMS, g.CachedMS, g.RTTMS)
				if g.OK && g.Method == "routed" && g.FirstMS <= g.RTTMS+10 {
					break
				}
			}
			switch {
			case !g.OK:
				t.Errorf("%s -> %s: %s", src.ID(), dst.ID(), g.Error)
			case g.Method != "routed":
				t.Errorf("%s -> %s: method %s, want routed", src.ID(), dst.ID(), g.Method)
			case g.FirstMS > g.RTTMS+10:
				t.Errorf("%s -> %s: uncached routed setup %.1f ms, over one routed round trip (%.1f ms) + 10 ms", src.ID(), dst.ID(), g.FirstMS, g.RTTMS)
			}
		}
	}
}
