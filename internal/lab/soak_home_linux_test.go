package lab_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gridlink/gridlink/internal/lab/topology"
)

// Issue 23: a node agent's first hub is its site's (matrix: the site's
// hub, then another site's as a fallback). When a killed hub is started
// again, its site's nodes, which fell over to the fallback meanwhile,
// return to it: the soak measures how long each site's nodes took after
// the restart, and checks at the end that every node is at its home hub.

// homeWait bounds the wait for a site's nodes after their hub restarted
// (the nodes probe at most every 30 s) and for every node at the end.
const homeWait = 90 * time.Second

// homeReturn is how long a site's nodes took to be back at its hub after
// it restarted: back of them by took (all if back == len(of)).
type homeReturn struct {
	site string
	took time.Duration
	back []string
	of   []string
	cut  bool // the soak ended first
}

// homeNodes are the running node agents whose home is site s.
func (S *soak) homeNodes(s *topology.Site) []string {
	var out []string
	for _, h := range S.o.Nodes() {
		if h.Site == s && !S.isDown("node "+h.ID()) {
			out = append(out, h.ID())
		}
	}
	return out
}

// atHome lists which of want site's hub holds.
func (S *soak) atHome(ctx context.Context, site string, want []string) []string {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	names, err := S.o.HubNodes(cctx, site)
	if err != nil {
		return nil
	}
	var back []string
	for _, n := range want {
		if slices.Contains(names, n) {
			back = append(back, n)
		}
	}
	return back
}

// watchHome waits (homeWait at most) until the nodes of site s are back at
// its hub, restarted at since, and records how long that took.
func (S *soak) watchHome(ctx context.Context, s *topology.Site, since time.Time) {
	want := S.homeNodes(s)
	r := homeReturn{site: s.Name, of: want}
	for {
		r.back, r.took = S.atHome(ctx, s.Name, want), time.Since(since)
		if len(r.back) == len(want) || r.took > homeWait {
			break
		}
		if !pause(ctx, 500*time.Millisecond) {
			r.cut = true
			break
		}
	}
	S.mu.Lock()
	S.returns = append(S.returns, r)
	S.mu.Unlock()
}

// homeAtEnd waits (homeWait at most, after the traffic ended) until every
// running node agent is at its home hub, and records who is not.
func (S *soak) homeAtEnd() {
	ctx, cancel := context.WithTimeout(context.Background(), homeWait)
	defer cancel()
	start := time.Now()
	for {
		var away []string
		for _, s := range S.topo.Sites {
			want := S.homeNodes(s)
			back := S.atHome(ctx, s.Name, want)
			for _, n := range want {
				if !slices.Contains(back, n) {
					away = append(away, n+" (home "+s.Name+")")
				}
			}
		}
		S.mu.Lock()
		S.away, S.homeCheck = away, time.Since(start)
		S.mu.Unlock()
		if len(away) == 0 || !pause(ctx, time.Second) {
			return
		}
	}
}

// homeReport writes the returns and the check at the end; S.mu is held.
func (S *soak) homeReport(b *strings.Builder) {
	fmt.Fprintf(b, "Nodes back at their home hub after it restarted (issue 23): %d restarts\n\n", len(S.returns))
	if len(S.returns) > 0 {
		fmt.Fprintln(b, "| hub | nodes back | of | after the restart |")
		fmt.Fprintln(b, "|---|---|---|---|")
		for _, r := range S.returns {
			after := r.took.Round(100 * time.Millisecond).String()
			switch {
			case r.cut:
				after += " (the soak ended)"
			case len(r.back) < len(r.of):
				after = fmt.Sprintf("**not all within %v**", homeWait)
			}
			fmt.Fprintf(b, "| %s | %d | %d | %s |\n", r.site, len(r.back), len(r.of), after)
		}
		fmt.Fprintln(b)
	}
	if len(S.away) == 0 {
		fmt.Fprintf(b, "At the end every node agent is at its home hub (checked %v after the traffic ended).\n\n", S.homeCheck.Round(100*time.Millisecond))
	} else {
		fmt.Fprintf(b, "At the end, %v after the traffic ended, **%d node agents are not at their home hub**: %s.\n\n", S.homeCheck.Round(100*time.Millisecond), len(S.away), strings.Join(S.away, ", "))
	}
}
