package lab_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/topology"
)

// The soak's chaos: one event at a time, its kind, target and length
// drawn from the seeded generator, 10 to 30 s apart. Wide-area faults
// are nftables rules in a site gateway's namespace (a table of their
// own, deleted when the event ends), on the traffic that crosses its
// wan0 to or from the other sites' wide-area prefixes: every packet
// (a flap, a partition) or a share drawn by numgen random (a loss
// burst). The link emulator itself has no run-time control.

// chaosEvent is one event: what, on what, from when until it was
// undone.
type chaosEvent struct {
	kind, target string
	touch        chaosTouch // what it touches (soak_attrib_linux_test.go)
	from, until  time.Time
}

// chaosGrace is how long after an event's end its effects may still
// explain a failure (a node re-attaching, routes converging, a resumed
// link catching up).
const chaosGrace = 30 * time.Second

// chaos runs events until the soak's last stretch (a sixth of it, at
// most a minute: quiet, for the last copies to finish), or until ctx
// ends.
func (S *soak) chaos(ctx context.Context, dur time.Duration) {
	stopAt := S.start.Add(dur - min(dur/6, time.Minute))
	kinds := []struct {
		weight int
		run    func(ctx context.Context) (target string, touch chaosTouch, err error)
		name   string
	}{
		{25, S.churnNode, "node leaves and joins"},
		{25, S.killHub, "hub killed (-9) and restarted"},
		{20, S.flap, "wide-area path down"},
		{20, S.lossBurst, "loss burst"},
		{10, S.partition, "partition"},
	}
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	for {
		if !pause(ctx, 10*time.Second+time.Duration(S.rng.Int64N(int64(20*time.Second)))) || time.Now().After(stopAt) {
			return
		}
		r := S.rng.IntN(total)
		i := 0
		for ; r >= kinds[i].weight; i++ {
			r -= kinds[i].weight
		}
		from := time.Now()
		target, touch, err := kinds[i].run(ctx)
		ev := chaosEvent{kind: kinds[i].name, target: target, touch: touch, from: from, until: time.Now()}
		S.mu.Lock()
		S.events = append(S.events, ev)
		S.mu.Unlock()
		S.t.Logf("%s: chaos: %s: %s (%v)", S.since(from), ev.kind, target, ev.until.Sub(from).Round(100*time.Millisecond))
		if err != nil {
			// the chaos could not be undone: the soak cannot go on
			S.t.Errorf("chaos %s %s: %v", ev.kind, target, err)
			return
		}
	}
}

// hold is an event's length: lo plus up to span more.
func (S *soak) hold(lo, span time.Duration) time.Duration {
	return lo + time.Duration(S.rng.Int64N(int64(span)))
}

// churnNode stops a churn node's agent (it leaves), and starts it again
// after 5 to 15 s (it joins).
func (S *soak) churnNode(ctx context.Context) (string, chaosTouch, error) {
	h := S.host(soakChurn[S.rng.IntN(len(soakChurn))])
	d := S.hold(5*time.Second, 10*time.Second)
	touch := chaosTouch{nodes: []string{h.ID()}}
	S.setDown("node "+h.ID(), true)
	if err := S.o.StopNode(h); err != nil {
		return h.ID(), touch, err
	}
	sleepCtx(ctx, d)
	err := S.o.StartNode(h)
	S.setDown("node "+h.ID(), false)
	S.retrack("node "+h.ID(), h, nodeMetrics, S.o.NodePID(h))
	return fmt.Sprintf("%s for %v", h.ID(), d.Round(100*time.Millisecond)), touch, err
}

// killHub kills a site's hub (SIGKILL) and starts it again after 3 to
// 10 s.
func (S *soak) killHub(ctx context.Context) (string, chaosTouch, error) {
	s := S.topo.Sites[S.rng.IntN(len(S.topo.Sites))]
	d := S.hold(3*time.Second, 7*time.Second)
	touch := chaosTouch{hubs: []string{s.Name}}
	S.setDown("hub "+s.Name, true)
	if err := S.o.KillHub(s.Name); err != nil {
		return s.Name, touch, err
	}
	sleepCtx(ctx, d)
	err := S.o.RestartHub(s.Name)
	if err == nil {
		restarted := time.Now()
		S.homes.Go(func() { S.watchHome(ctx, s, restarted) }) // soak_home_linux_test.go
	}
	S.setDown("hub "+s.Name, false)
	S.retrack("hub "+s.Name, hubHostOf(s), hubMetrics, S.o.HubPID(s.Name))
	return fmt.Sprintf("%s for %v", s.Name, d.Round(100*time.Millisecond)), touch, err
}

// flap takes the wide-area path between two sites down for 2 to 8 s.
func (S *soak) flap(ctx context.Context) (string, chaosTouch, error) {
	sites := S.topo.Sites
	i := S.rng.IntN(len(sites))
	j := (i + 1 + S.rng.IntN(len(sites)-1)) % len(sites)
	d := S.hold(2*time.Second, 6*time.Second)
	target := fmt.Sprintf("%s-%s for %v", sites[i].Name, sites[j].Name, d.Round(100*time.Millisecond))
	return S.wanFault(ctx, target, d, map[*topology.Site][]*topology.Site{sites[i]: {sites[j]}}, 0)
}

// lossBurst drops 5 to 30 % of a site's wide-area packets for 10 to
// 20 s.
func (S *soak) lossBurst(ctx context.Context) (string, chaosTouch, error) {
	s := S.topo.Sites[S.rng.IntN(len(S.topo.Sites))]
	permille := 50 + S.rng.IntN(251)
	d := S.hold(10*time.Second, 10*time.Second)
	var others []*topology.Site
	for _, o := range S.topo.Sites {
		if o != s {
			others = append(others, o)
		}
	}
	target := fmt.Sprintf("%s %.1f%% for %v", s.Name, float64(permille)/10, d.Round(100*time.Millisecond))
	return S.wanFault(ctx, target, d, map[*topology.Site][]*topology.Site{s: others}, permille)
}

// partition splits the sites in two (one to three on one side) for 10
// to 25 s, then heals.
func (S *soak) partition(ctx context.Context) (string, chaosTouch, error) {
	sites := append([]*topology.Site(nil), S.topo.Sites...)
	S.rng.Shuffle(len(sites), func(i, j int) { sites[i], sites[j] = sites[j], sites[i] })
	k := 1 + S.rng.IntN(3)
	a, b := sites[:k], sites[k:]
	d := S.hold(10*time.Second, 15*time.Second)
	cut := map[*topology.Site][]*topology.Site{}
	for _, s := range a {
		cut[s] = b
	}
	names := func(ss []*topology.Site) string {
		var n []string
		for _, s := range ss {
			n = append(n, s.Name)
		}
		return strings.Join(n, ",")
	}
	target := fmt.Sprintf("{%s} | {%s} for %v", names(a), names(b), d.Round(100*time.Millisecond))
	return S.wanFault(ctx, target, d, cut, 0)
}

// chaosTable is the nftables table of the soak's wide-area faults.
const chaosTable = "soakchaos"

// wanFault drops, at each site gateway of cut, the traffic to and from
// the sites it lists (every packet, or permille of them), for d; it
// returns target, and the site pairs cut as what the event touches.
func (S *soak) wanFault(ctx context.Context, target string, d time.Duration, cut map[*topology.Site][]*topology.Site, permille int) (string, chaosTouch, error) {
	var touch chaosTouch
	for gw, remote := range cut {
		for _, r := range remote {
			touch.wan = append(touch.wan, [2]string{gw.Name, r.Name})
		}
	}
	if err := cutWAN(cut, permille); err != nil {
		return target, touch, err
	}
	sleepCtx(ctx, d)
	return target, touch, healWAN(cut)
}

// cutWAN drops, at each site gateway of cut, the traffic to and from
// the sites it lists (every packet, or permille of them), until healWAN.
func cutWAN(cut map[*topology.Site][]*topology.Site, permille int) error {
	for gw, remote := range cut {
		var ps []string
		for _, r := range remote {
			for _, p := range r.WANPrefixes() {
				ps = append(ps, p.String())
			}
		}
		match := ""
		if permille > 0 {
			match = fmt.Sprintf("numgen random mod 1000 < %d ", permille)
		}
		set := "{ " + strings.Join(ps, ", ") + " }"
		rules := fmt.Sprintf(`table inet %[1]s {
  chain soak_fwd {
    type filter hook forward priority -10; policy accept;
    oifname "%[2]s" ip daddr %[3]s %[4]sdrop
    iifname "%[2]s" ip saddr %[3]s %[4]sdrop
  }
}
`, chaosTable, lab.WANDev, set, match)
		if _, errb, err := tryInNS(context.Background(), lab.GatewayNS(gw), []byte(rules), "nft", "-f", "-"); err != nil {
			healWAN(cut)
			return fmt.Errorf("nft at %s: %v: %s", gw.Name, err, errb)
		}
	}
	return nil
}

// healWAN deletes the fault tables of cut's gateways.
func healWAN(cut map[*topology.Site][]*topology.Site) error {
	var errs []string
	for gw := range cut {
		_, errb, err := tryInNS(context.Background(), lab.GatewayNS(gw), nil, "nft", "delete", "table", "inet", chaosTable)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v: %s", gw.Name, err, errb))
		}
	}
	if errs != nil {
		return fmt.Errorf("heal: %s", strings.Join(errs, "; "))
	}
	return nil
}

// sleepCtx sleeps d, or until ctx ends; an event is undone either way.
func sleepCtx(ctx context.Context, d time.Duration) { pause(ctx, d) }

func (S *soak) setDown(key string, down bool) {
	S.mu.Lock()
	defer S.mu.Unlock()
	S.down[key] = down
}

// explain lists the events that explain f (soak_attrib_linux_test.go),
// and counts the others in its time, off its path.
func (S *soak) explain(f failure) (on []string, off int) {
	ex := S.paths.explaining(f.path, S.events, f.from, f.until)
	for _, ev := range ex {
		on = append(on, fmt.Sprintf("%s %s at %s", ev.kind, ev.target, S.since(ev.from)))
	}
	for _, ev := range S.events {
		if ev.inTime(f.from, f.until) {
			off++
		}
	}
	return on, off - len(ex)
}
