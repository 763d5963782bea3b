package matrix

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/status"
)

// The NAT traversal report (`gridlab traversal`): one hub on a public host,
// a node agent on every host, and for every ordered pair of hosts a number
// of uncached connection attempts, each recording the method that won and
// its setup time. Every pair's expected method follows from the two sites'
// firewall and NAT kinds (Expect); splicing is expected wherever neither a
// direct nor a reverse connection can work and neither side allocates
// ports at random or restricts its outgoing connections.

// TraversalHubPort is where the traversal hub listens: 443, which even a
// site that only lets tcp/22 and tcp/443 out can reach.
const TraversalHubPort = 443

// TraversalPair is one ordered pair's result.
type TraversalPair struct {
	Src      string         `json:"src"`
	Dst      string         `json:"dst"`
	SrcKind  string         `json:"src_kind"`
	DstKind  string         `json:"dst_kind"`
	Expect   string         `json:"expect"`
	Attempts int            `json:"attempts"`
	Methods  map[string]int `json:"methods"` // successes by method
	Failed   int            `json:"failed"`
	// SpliceRate is the share of attempts that spliced, for pairs where a
	// splice is expected.
	SpliceRate *float64 `json:"splice_rate,omitempty"`
	MedianMS   float64  `json:"median_ms"`
	AsExpected bool     `json:"as_expected"` // every attempt connected, by Expect
	Errors     []string `json:"errors,omitempty"`
}

// TraversalReport is the whole run.
type TraversalReport struct {
	Topology string          `json:"topology"`
	Hub      string          `json:"hub"`
	Pairs    []TraversalPair `json:"pairs"`
	Summary  struct {
		Pairs       int     `json:"pairs"`
		Attempts    int     `json:"attempts"`
		Connected   int     `json:"connected"`
		SplicePairs int     `json:"splice_pairs"` // pairs where a splice is expected
		SpliceRate  float64 `json:"splice_rate"`  // over all their attempts
		AsExpected  int     `json:"as_expected"`  // pairs
	} `json:"summary"`
}

// SiteKind describes a site's firewall and NAT in a few words.
func SiteKind(s *topology.Site) string {
	var parts []string
	if s.NAT != topology.NATNone {
		parts = append(parts, "nat "+s.NAT)
	}
	if s.IGD {
		parts = append(parts, "igd")
	}
	if s.Firewall == topology.FirewallStateful && s.NAT == topology.NATNone {
		how := "drop"
		if s.Reject {
			how = "reject"
		}
		parts = append(parts, "firewall "+how)
	}
	if len(s.Out) > 0 {
		var ps []string
		for _, p := range s.Out {
			ps = append(ps, p.String())
		}
		parts = append(parts, "out "+strings.Join(ps, ","))
	}
	if len(parts) == 0 {
		return "open"
	}
	return strings.Join(parts, ", ")
}

// open reports whether anyone may connect in to hosts of s.
func open(s *topology.Site) bool {
	return s.Firewall == topology.FirewallNone && s.NAT == topology.NATNone
}

// Expect is the method gridlink should use from src to dst, the most
// direct one their sites allow (port mapping is not used here).
func Expect(src, dst *topology.Host) string {
	a, b := src.Site, dst.Site
	switch {
	case a == b, open(b) && len(a.Out) == 0:
		return "direct"
	case open(a) && len(b.Out) == 0:
		return "reverse"
	case a.NAT != topology.NATRandom && b.NAT != topology.NATRandom && len(a.Out) == 0 && len(b.Out) == 0:
		return "splice"
	}
	return "routed"
}

// StartTraversalOverlay starts a hub on hub (listening on
// TraversalHubPort) and a node agent on every host of t.
func StartTraversalOverlay(ctx context.Context, t *topology.Topology, bin string, hub *topology.Host) (*Overlay, []*topology.Host, error) {
	o, err := newOverlay(t, bin, false)
	if err != nil {
		return nil, nil, err
	}
	args, err := o.certified(ca.Hub, hub.Site.Name, []string{"hub", "--name", hub.Site.Name, "--listen", fmt.Sprintf("0.0.0.0:%d", TraversalHubPort)})
	if err == nil {
		err = o.start(hub, "hub", args)
	}
	if err != nil {
		return nil, nil, err
	}
	spec := fmt.Sprintf("%s:%d", hub.PrimaryAddr(), TraversalHubPort)
	var hosts []*topology.Host
	for _, s := range t.Sites {
		for _, h := range s.Hosts {
			args, err := o.certified(ca.Node, h.ID(), []string{"node", "--verbose", "--name", h.ID(), "--hub", spec})
			if err == nil {
				err = o.start(h, "node", args)
			}
			if err != nil {
				o.Stop()
				return nil, nil, err
			}
			hosts = append(hosts, h)
		}
	}
	if err := o.waitAgents(hosts); err != nil {
		o.Stop()
		return nil, nil, err
	}
	return o, hosts, nil
}

// Traversal measures every ordered pair of hosts with attempts uncached
// connections each. progress, if not nil, gets a line per pair.
func (o *Overlay) Traversal(ctx context.Context, hub *topology.Host, hosts []*topology.Host, attempts int, progress io.Writer) *TraversalReport {
	rep := &TraversalReport{Topology: o.t.Name, Hub: hub.ID()}
	// every node attached and its NAT classified (a few seconds after its
	// start) before measuring.
	deadline := time.Now().Add(30 * time.Second)
	for _, h := range hosts {
		for time.Now().Before(deadline) {
			out, err := o.run(ctx, h, "ping", "--json", "--dials", "1", "--count", "1", hub.ID())
			var pr status.Ping
			if err == nil && json.Unmarshal(out, &pr) == nil && pr.Error == "" {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	time.Sleep(3 * time.Second)
	for _, src := range hosts {
		for _, dst := range hosts {
			if src == dst {
				continue
			}
			p := o.traversalPair(ctx, src, dst, attempts)
			if progress != nil {
				fmt.Fprintf(progress, "%-14s -> %-14s expect %-7s got %v, %d failed, median %.1f ms\n", p.Src, p.Dst, p.Expect, p.Methods, p.Failed, p.MedianMS)
			}
			rep.add(p)
		}
	}
	return rep
}

func (o *Overlay) traversalPair(ctx context.Context, src, dst *topology.Host, attempts int) TraversalPair {
	p := TraversalPair{Src: src.ID(), Dst: dst.ID(), SrcKind: SiteKind(src.Site), DstKind: SiteKind(dst.Site),
		Expect: Expect(src, dst), Attempts: attempts, Methods: map[string]int{}}
	var times []float64
	for i := 0; i < attempts; i++ {
		out, err := o.run(ctx, src, "ping", "--json", "--fresh", "--dials", "1", "--count", "1", dst.ID())
		var pr status.Ping
		if jerr := json.Unmarshal(out, &pr); jerr != nil || pr.Error != "" || len(pr.SetupMS) != 1 {
			p.Failed++
			why := pr.Error
			if why == "" {
				why = fmt.Sprintf("%v %v", err, jerr)
			}
			if len(p.Errors) < 3 {
				p.Errors = append(p.Errors, why)
			}
			continue
		}
		p.Methods[pr.Method]++
		times = append(times, pr.SetupMS[0])
	}
	if len(times) > 0 {
		sort.Float64s(times)
		p.MedianMS = times[len(times)/2]
	}
	if p.Expect == "splice" {
		r := float64(p.Methods["splice"]) / float64(attempts)
		p.SpliceRate = &r
	}
	p.AsExpected = p.Failed == 0 && p.Methods[p.Expect] == attempts
	return p
}

func (r *TraversalReport) add(p TraversalPair) {
	r.Pairs = append(r.Pairs, p)
	s := &r.Summary
	s.Pairs++
	s.Attempts += p.Attempts
	s.Connected += p.Attempts - p.Failed
	if p.AsExpected {
		s.AsExpected++
	}
	if p.Expect != "splice" {
		return
	}
	s.SplicePairs++
	tried, spliced := 0, 0
	for _, q := range r.Pairs {
		if q.Expect == "splice" {
			tried += q.Attempts
			spliced += q.Methods["splice"]
		}
	}
	s.SpliceRate = float64(spliced) / float64(tried)
}

// WriteJSON prints the report as one JSON object.
func (r *TraversalReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable prints the report for people.
func (r *TraversalReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "%-14s %-14s %-26s %-26s %-7s %-24s %7s %9s\n", "from", "to", "from kind", "to kind", "expect", "got", "splice", "median")
	for _, p := range r.Pairs {
		var got []string
		for m, n := range p.Methods {
			got = append(got, fmt.Sprintf("%s %d", m, n))
		}
		sort.Strings(got)
		if p.Failed > 0 {
			got = append(got, fmt.Sprintf("failed %d", p.Failed))
		}
		rate := "-"
		if p.SpliceRate != nil {
			rate = fmt.Sprintf("%.0f%%", 100**p.SpliceRate)
		}
		mark := ""
		if !p.AsExpected {
			mark = "  UNEXPECTED"
		}
		fmt.Fprintf(w, "%-14s %-14s %-26s %-26s %-7s %-24s %7s %6.1f ms%s\n", p.Src, p.Dst, p.SrcKind, p.DstKind, p.Expect, strings.Join(got, ", "), rate, p.MedianMS, mark)
	}
	s := r.Summary
	fmt.Fprintf(w, "%d pairs, %d attempts, %d connected; %d pairs as expected; splicing expected for %d pairs, succeeded in %.1f%% of their attempts\n",
		s.Pairs, s.Attempts, s.Connected, s.AsExpected, s.SplicePairs, 100*s.SpliceRate)
}

// StartHubs starts a hub on public (listening on TraversalHubPort) and one
// on each of behind, which peer with it only: hubs behind NATs and
// firewalls that must find each other through it.
func StartHubs(ctx context.Context, t *topology.Topology, bin string, public *topology.Host, behind []*topology.Host) (*Overlay, error) {
	o, err := newOverlay(t, bin, false)
	if err != nil {
		return nil, err
	}
	args, err := o.certified(ca.Hub, public.ID(), []string{"hub", "--verbose", "--name", public.ID(), "--listen", fmt.Sprintf("0.0.0.0:%d", TraversalHubPort)})
	if err == nil {
		err = o.start(public, "hub", args)
	}
	if err != nil {
		return nil, err
	}
	spec := fmt.Sprintf("%s:%d", public.PrimaryAddr(), TraversalHubPort)
	for _, h := range behind {
		args, err := o.certified(ca.Hub, h.ID(), []string{"hub", "--verbose", "--name", h.ID(), "--listen", fmt.Sprintf("0.0.0.0:%d", HubPort), "--peer", spec})
		if err == nil {
			err = o.start(h, "hub", args)
		}
		if err != nil {
			o.Stop()
			return nil, err
		}
	}
	return o, nil
}

// HubNodes lists the names of the nodes attached to site's hub, by its
// status.
func (o *Overlay) HubNodes(ctx context.Context, site string) ([]string, error) {
	s := o.t.Site(site)
	if s == nil {
		return nil, fmt.Errorf("no site %s", site)
	}
	out, err := o.run(ctx, HubHost(s), "status", "--hub", "--json")
	if err != nil {
		return nil, err
	}
	var st status.Hub
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("hub status of %s: %w", site, err)
	}
	var names []string
	for _, m := range st.Nodes {
		names = append(names, m.Name)
	}
	return names, nil
}

// HubHops returns, for the hub running on h, the hop count of its route to
// every other hub, by name (a neighbour is 1 hop away).
func (o *Overlay) HubHops(ctx context.Context, h *topology.Host) (map[string]int, error) {
	out, err := o.run(ctx, h, "status", "--hub", "--json")
	if err != nil {
		return nil, err
	}
	var st status.Hub
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("hub status on %s: %w", h.ID(), err)
	}
	hops := map[string]int{}
	for _, r := range st.Routes {
		hops[r.Name] = r.Hops
	}
	return hops, nil
}
