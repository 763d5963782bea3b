package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/internal/lab/labtest"
	"github.com/gridlink/gridlink/internal/lab/matrix"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/status"
)

// Issue 35: a virtual-network TCP flow across sites carries on, every
// byte in order, through the death of every hub on its path and a cut
// wide-area path. The flow runs from das3d-n1 to g5k-n1 (routed: g5k-n1
// has no way out but its site's hub) by its virtual address; the
// receiver checks the sequence (soak_stream_linux_test.go's streamByte)
// and notes the longest time no byte came. Events, one after another:
// the sender's hub killed (-9) and started again 3 s later, then the
// receiver's, then a transit hub (the wide-area path between the two
// sites cut meanwhile, so the route goes through another site's hub;
// healed after it: a route change), then the wide-area path of the
// sender's site to every other cut for 10 s. Each event's stall must be at most the overlay's detection time
// (hubserver.TrunkSilence) plus the time until a path existed again
// (both ends attached to hubs, each hub with a route to the other's:
// measured) plus 2 s.

const (
	flowPort  = 7200
	flowChunk = 32 << 10
	flowEvery = 10 * time.Millisecond // 3.2 MiB/s
	hubDown   = 3 * time.Second
	// flowMoving: after an event, the flow must have moved again for
	// this long before the next.
	flowMoving = 3 * time.Second
	// flowGiveUp bounds the wait for a flow to move again after an
	// event (a correctness bound: far past every stall allowed).
	flowGiveUp = 90 * time.Second
	// gapMin: shorter pauses between the receiver's reads are not
	// noted (at 3.2 MiB/s, data comes every 10 ms).
	gapMin = 100 * time.Millisecond
)

// flowMeter is the receiving end's view of the flow.
type flowMeter struct {
	mu      sync.Mutex
	got     int64
	last    time.Time // when a byte last came
	gaps    []gap     // every pause longer than gapMin
	bad     string    // the first byte out of sequence, or the error that ended it
	started time.Time
}

type gap struct{ from, to time.Time }

func (m *flowMeter) serve(c net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		now := time.Now()
		m.mu.Lock()
		for i := range n {
			if buf[i] != streamByte(m.got+int64(i)) {
				if m.bad == "" {
					m.bad = fmt.Sprintf("byte %d out of sequence", m.got+int64(i))
				}
				m.mu.Unlock()
				return
			}
		}
		if n > 0 {
			if m.got == 0 {
				m.started = now
			} else if now.Sub(m.last) > gapMin {
				m.gaps = append(m.gaps, gap{m.last, now})
			}
			m.got += int64(n)
			m.last = now
		}
		if err != nil && m.bad == "" && err != io.EOF {
			m.bad = fmt.Sprintf("after %d bytes: %v", m.got, err)
		}
		m.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// movedSince reports whether bytes came for flowMoving after t, with no
// pause over a second since.
func (m *flowMeter) movedSince(t time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	moving := m.last.After(t) && time.Since(m.last) < time.Second
	for i := len(m.gaps) - 1; i >= 0; i-- {
		if g := m.gaps[i]; g.to.Sub(g.from) > time.Second {
			t = later(t, g.to)
			break
		}
	}
	return moving && m.last.Sub(t) >= flowMoving
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// stallSince is the longest pause that ended after t, or is going on.
func (m *flowMeter) stallSince(t time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	longest := time.Since(m.last)
	for _, g := range m.gaps {
		if g.to.After(t) {
			longest = max(longest, g.to.Sub(later(g.from, t)))
		}
	}
	return longest
}

// hubState is the hub of site's status, or nil when it does not answer.
func hubState(ctx context.Context, o *matrix.Overlay, site *topology.Site) *status.Hub {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := o.Run(cctx, matrix.HubHost(site), "status", "--hub", "--json")
	if err != nil {
		return nil
	}
	var st status.Hub
	if json.Unmarshal(out, &st) != nil {
		return nil
	}
	return &st
}

// pathExists reports whether src and dst are attached to hubs (their
// agents' word) and their hubs have routes to each other.
func pathExists(ctx context.Context, o *matrix.Overlay, tp *topology.Topology, src, dst *topology.Host) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	a, err := o.Status(cctx, src)
	if err != nil || a.Attach != "" {
		return false
	}
	b, err := o.Status(cctx, dst)
	if err != nil || b.Attach != "" {
		return false
	}
	routes := func(from, to string) bool {
		site := tp.Site(from) // lab hubs go by their site's name
		if site == nil {
			return false
		}
		st := hubState(ctx, o, site)
		return st != nil && slices.ContainsFunc(st.Routes, func(r status.Route) bool { return r.Name == to && r.Reachable })
	}
	ha, hb := a.Node.HubName, b.Node.HubName
	return ha == hb || routes(ha, hb) && routes(hb, ha)
}

// nextHop is the site whose hub src's site's hub sends to dst's site's
// hub through ("" when none, or it is dst's own).
func nextHop(ctx context.Context, o *matrix.Overlay, src, dst *topology.Site) string {
	st := hubState(ctx, o, src)
	if st == nil {
		return ""
	}
	i := slices.IndexFunc(st.Routes, func(r status.Route) bool { return r.Name == dst.Name && r.Reachable })
	if i < 0 {
		return ""
	}
	j := slices.IndexFunc(st.Routes, func(r status.Route) bool { return r.Hub == st.Routes[i].NextHop })
	if j < 0 || st.Routes[j].Name == dst.Name {
		return ""
	}
	return st.Routes[j].Name
}

func TestGrid6VIPFlowSurvivesHubs(t *testing.T) {
	bin := gridlinkBin(t)
	topo := labtest.Up(t, "grid6", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	src, dst := labtest.Host(t, topo, "das3d-n1"), labtest.Host(t, topo, "g5k-n1")
	o, err := matrix.StartOverlayWith(ctx, topo, bin, matrix.Options{VIP: true, Hosts: []*topology.Host{src, dst}})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Stop()
	v, ok := o.VIP(dst)
	if !ok {
		t.Fatalf("%s has no virtual addresses", dst.ID())
	}
	m := &flowMeter{}
	labtest.Listen(t, dst, netip.AddrPortFrom(v.V4, flowPort).String(), m.serve)
	var c net.Conn
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if c, err = labtest.Dial(src, netip.AddrPortFrom(v.V4, flowPort).String(), "", 10*time.Second); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect %s -> %s (%s): %v", src.ID(), dst.ID(), v.V4, err)
		}
	}
	defer c.Close()
	sendErr := make(chan error, 1)
	stop := make(chan struct{})
	var sent int64
	go func() {
		buf := make([]byte, flowChunk)
		tick := time.NewTicker(flowEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				sendErr <- nil
				return
			case <-tick.C:
			}
			for i := range buf {
				buf[i] = streamByte(sent + int64(i))
			}
			_ = c.SetWriteDeadline(time.Now().Add(flowGiveUp))
			n, err := c.Write(buf)
			sent += int64(n)
			if err != nil {
				sendErr <- err
				return
			}
		}
	}()
	waitFlow := func(what string, since time.Time) {
		t.Helper()
		for deadline := time.Now().Add(flowGiveUp); !m.movedSince(since); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the flow did not move again within %v (stalled %v); %s's status: %s", what, flowGiveUp,
					m.stallSince(since).Round(100*time.Millisecond), src.ID(), vipPeerWords(ctx, o, src, dst))
			}
		}
	}
	waitFlow("start", time.Now())
	detect := hubserver.TrunkSilence(0)
	type result struct {
		what          string
		stall, pathIn time.Duration
	}
	var results []result
	// event disrupts, undoes it after hold, and waits for the flow to
	// move again; meanwhile it asks the hubs whether a path exists, every
	// 200 ms from the disruption on: the path is back at the first
	// answer yes after the last no (at once if it never was gone).
	event := func(what string, disrupt func() error, hold time.Duration, undo func() error) {
		t.Helper()
		began := time.Now()
		if err := disrupt(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var pathIn time.Duration
		polled := make(chan struct{})
		watching, stopWatch := context.WithCancel(ctx)
		go func() {
			defer close(polled)
			for watching.Err() == nil {
				exists := pathExists(watching, o, topo, src, dst)
				switch {
				case watching.Err() != nil: // a poll cut short
				case !exists:
					pathIn = -1
				case pathIn < 0:
					pathIn = time.Since(began)
				}
				pause(watching, 200*time.Millisecond)
			}
		}()
		time.Sleep(hold)
		err := undo()
		if err == nil {
			waitFlow(what, began)
		}
		stopWatch()
		<-polled
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if pathIn < 0 {
			t.Fatalf("%s: the flow moved again, yet the hubs show no path from %s to %s", what, src.ID(), dst.ID())
		}
		r := result{what, m.stallSince(began), pathIn}
		results = append(results, r)
		t.Logf("%s: longest stall %v, a path again after %v", what, r.stall.Round(10*time.Millisecond), pathIn.Round(10*time.Millisecond))
	}
	killHub := func(site string) (string, func() error, time.Duration, func() error) {
		return fmt.Sprintf("hub %s killed (-9), started again after %v", site, hubDown),
			func() error { return o.KillHub(site) }, hubDown, func() error { return o.RestartHub(site) }
	}
	none := func() error { return nil }
	event(killHub(src.Site.Name)) // the sender's
	event(killHub(dst.Site.Name)) // the receiver's

	// the wide-area path between the two sites cut: the route goes
	// through another site's hub
	direct := map[*topology.Site][]*topology.Site{src.Site: {dst.Site}}
	event("wide-area path "+src.Site.Name+"-"+dst.Site.Name+" cut", func() error { return cutWAN(direct, 0) }, 0, none)
	defer healWAN(direct)
	var transit string
	for deadline := time.Now().Add(30 * time.Second); transit == ""; time.Sleep(500 * time.Millisecond) {
		if transit = nextHop(ctx, o, src.Site, dst.Site); transit == "" && time.Now().After(deadline) {
			t.Fatalf("no transit hub between %s and %s with their path cut", src.Site.Name, dst.Site.Name)
		}
	}
	what, kill, hold, restart := killHub(transit)
	event("transit "+what, kill, hold, restart)
	event("wide-area path "+src.Site.Name+"-"+dst.Site.Name+" back", none, 0, func() error { return healWAN(direct) })

	// the sender's site cut off from every other for 10 s
	var others []*topology.Site
	for _, s := range topo.Sites {
		if s != src.Site {
			others = append(others, s)
		}
	}
	all := map[*topology.Site][]*topology.Site{src.Site: others}
	event("wide-area path of "+src.Site.Name+" to every other site cut for 10 s",
		func() error { return cutWAN(all, 0) }, 10*time.Second, func() error { return healWAN(all) })
	close(stop)
	if err := <-sendErr; err != nil {
		t.Errorf("the sender: %v (%d bytes sent)", err, sent)
	}
	m.mu.Lock()
	got, bad := m.got, m.bad
	m.mu.Unlock()
	if bad != "" {
		t.Errorf("the receiver: %s", bad)
	}
	var longest result
	for _, r := range results {
		if r.stall > longest.stall {
			longest = r
		}
		if bound := detect + r.pathIn + 2*time.Second; r.stall > bound {
			t.Errorf("%s: the flow stalled %v, want at most %v (detection %v + a path again after %v + 2 s)",
				r.what, r.stall.Round(10*time.Millisecond), bound.Round(10*time.Millisecond), detect, r.pathIn.Round(10*time.Millisecond))
		}
	}
	t.Logf("longest stall %v (%s); %d bytes in order; %s's status: %s", longest.stall.Round(10*time.Millisecond), longest.what, got, src.ID(), vipPeerWords(ctx, o, src, dst))
	if !strings.Contains(fmt.Sprint(results), "transit") {
		t.Error("no transit hub was killed")
	}
}

// vipPeerWords is h's virtual-network view of peer, for a report.
func vipPeerWords(ctx context.Context, o *matrix.Overlay, h, peer *topology.Host) string {
	p, err := vipPeer(ctx, o, h, peer.ID())
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%+v", p)
}
