package matrix

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gridlink/gridlink/internal/lab"
	"github.com/gridlink/gridlink/internal/lab/topology"
	"github.com/gridlink/gridlink/pki/ca"
	"github.com/gridlink/gridlink/status"
)

// HubPort is where lab hubs listen.
const HubPort = 7946

// GridlinkResult is one pair's gridlink connection.
type GridlinkResult struct {
	OK       bool    `json:"ok"`
	Method   string  `json:"method,omitempty"`    // of the first (uncached) connection
	FirstMS  float64 `json:"first_ms,omitempty"`  // uncached setup time
	CachedMS float64 `json:"cached_ms,omitempty"` // median setup time of the next cachedDials connections
	Cached   string  `json:"cached_method,omitempty"`
	RTTMS    float64 `json:"rtt_ms,omitempty"` // median echo round trip
	Error    string  `json:"error,omitempty"`
}

// Overlay is a running gridlink overlay in the lab: a hub per site and a
// node agent on every matrix host, admitted by the lab's CA (lab.OpenCA):
// every hub and node runs with a certificate for its identity key.
type Overlay struct {
	t     *topology.Topology
	bin   string
	ca    *lab.CA
	procs []*exec.Cmd
	hubs  map[string]*exec.Cmd // by site
	opts  Options
	nodes []*topology.Host       // the hosts running node agents
	vip   map[*topology.Host]VIP // their virtual addresses (Options.VIP)

	// what each hub and node agent was started with, to start it again
	// (restart.go)
	hubArgv  map[string][]string
	nodeArgv map[*topology.Host][]string
	nodeWrap map[*topology.Host][]string
	nodeCmd  map[*topology.Host]*exec.Cmd
}

// newOverlay is an overlay of no processes yet, with the lab's CA unless
// open.
func newOverlay(t *topology.Topology, bin string, open bool) (*Overlay, error) {
	o := &Overlay{t: t, bin: bin, hubs: map[string]*exec.Cmd{}, hubArgv: map[string][]string{},
		nodeArgv: map[*topology.Host][]string{}, nodeWrap: map[*topology.Host][]string{}, nodeCmd: map[*topology.Host]*exec.Cmd{}}
	if !open {
		c, err := lab.OpenCA()
		if err != nil {
			return nil, err
		}
		o.ca = c
	}
	return o, nil
}

// CA is the lab CA that admits the overlay's hubs and nodes; nil for an
// open overlay.
func (o *Overlay) CA() *lab.CA { return o.ca }

// Issue gives a gridlink command that runs a node of its own (serve, cp,
// perf) in the overlay a key and certificate of the lab CA: its Args go on
// the command line. An open overlay needs none: Issued{} has no Args.
func (o *Overlay) Issue(name string) (lab.Issued, error) {
	if o.ca == nil {
		return lab.Issued{}, nil
	}
	return o.ca.Issue(ca.Node, name)
}

// IssueUser gives a gridlink command run as user (in groups) a proxy of
// the overlay's CA: the flags --ca, --crl and --proxy (none in an open
// overlay).
func (o *Overlay) IssueUser(user string, groups ...string) (lab.Issued, error) {
	if o.ca == nil {
		return lab.Issued{}, nil
	}
	return o.ca.IssueProxy(user, groups...)
}

// certified is args with the flags of a new certificate for a hub or node
// called name (none in an open overlay).
func (o *Overlay) certified(role ca.Role, name string, args []string) ([]string, error) {
	if o.ca == nil {
		return args, nil
	}
	i, err := o.ca.Issue(role, name)
	if err != nil {
		return nil, err
	}
	return append(args, i.Args()...), nil
}

// HubHost is where a site's hub runs: its frontend, else its matrix host.
func HubHost(s *topology.Site) *topology.Host {
	for _, h := range s.Hosts {
		if h.Role == "frontend" {
			return h
		}
	}
	return s.MatrixHost()
}

// hubSpec is how hubs elsewhere reach site s's hub, or "" if they cannot
// (it then links outward only).
func hubSpec(s *topology.Site) string {
	h := HubHost(s)
	for _, ifc := range h.Ifaces {
		if ifc.Net.Kind == topology.NetPublic {
			return fmt.Sprintf("%s:%d", ifc.Addr, HubPort)
		}
	}
	if h.Runs("sshd") {
		for _, f := range s.Forwards {
			if f.Host == h && f.Proto == "tcp" && f.ToPort == 22 {
				return fmt.Sprintf("ssh://root@%s:%d/127.0.0.1:%d", s.WAN, f.Port, HubPort)
			}
		}
	}
	return ""
}

// hubFrom is the address host n uses for its site's hub.
func hubFrom(n *topology.Host) string {
	h := HubHost(n.Site)
	if h == n {
		return fmt.Sprintf("127.0.0.1:%d", HubPort)
	}
	for _, a := range n.Ifaces {
		for _, b := range h.Ifaces {
			if a.Net == b.Net {
				return fmt.Sprintf("%s:%d", b.Addr, HubPort)
			}
		}
	}
	return fmt.Sprintf("%s:%d", h.PrimaryAddr(), HubPort)
}

// HubAddr is the address host n uses for its site's hub (HOST:PORT), for
// gridlink commands started in n that run their own node.
func HubAddr(n *topology.Host) string { return hubFrom(n) }

// fallbackHub is another site's hub that node n can reach directly (a
// public hub, when n has a public address), or "".
func fallbackHub(t *topology.Topology, n *topology.Host) string {
	if _, _, ok := n.DefaultRoute(); !ok || n.PrimaryAddr().IsPrivate() {
		return ""
	}
	for _, other := range t.Sites {
		if other == n.Site {
			continue
		}
		if spec := hubSpec(other); spec != "" && !strings.HasPrefix(spec, "ssh://") {
			return spec
		}
	}
	return ""
}

// StartOverlay starts hubs and node agents in the running lab t, using the
// gridlink binary bin, and waits until every agent answers. Nodes with a
// public address also get another site's hub to fall back on.
func StartOverlay(ctx context.Context, t *topology.Topology, bin string) (*Overlay, error) {
	return startOverlay(ctx, t, bin, false)
}

// StartOpenOverlay is StartOverlay without the lab CA: an open grid, where
// any key may attach and link (every connection still proves its ends'
// keys). It is the baseline of the cost of admission (bench/security.sh).
func StartOpenOverlay(ctx context.Context, t *topology.Topology, bin string) (*Overlay, error) {
	return startOverlay(ctx, t, bin, true)
}

func startOverlay(ctx context.Context, t *topology.Topology, bin string, open bool) (*Overlay, error) {
	return StartOverlayWith(ctx, t, bin, Options{Open: open})
}

// StartOverlayWith starts hubs and node agents as StartOverlay does, as
// opts say (on which hosts, with the virtual network or not).
func StartOverlayWith(ctx context.Context, t *topology.Topology, bin string, opts Options) (*Overlay, error) {
	o, err := newOverlay(t, bin, opts.Open)
	if err != nil {
		return nil, err
	}
	o.opts = opts
	for _, s := range t.Sites {
		args := []string{"hub", "--name", s.Name, "--listen", fmt.Sprintf("0.0.0.0:%d", HubPort),
			"--identity", lab.SSHClientKey(), "--known-hosts", lab.SSHKnownHosts()}
		for _, other := range t.Sites {
			if spec := hubSpec(other); other != s && spec != "" {
				args = append(args, "--peer", spec)
			}
		}
		if opts.HubControl != nil {
			args = append(args, "--control", opts.HubControl(s.Name))
		}
		if opts.HubArgs != nil {
			args = append(args, opts.HubArgs(s.Name)...)
		}
		if args, err = o.certified(ca.Hub, s.Name, args); err == nil {
			o.hubArgv[s.Name] = args
			err = o.start(HubHost(s), "hub", args)
		}
		if err != nil {
			o.Stop()
			return nil, err
		}
		o.hubs[s.Name] = o.procs[len(o.procs)-1]
	}
	for _, h := range opts.hosts(t) {
		args := []string{"node", "--verbose", "--name", h.ID(), "--hub", hubFrom(h)}
		if fb := fallbackHub(t, h); fb != "" {
			args = append(args, "--hub", fb)
		}
		args = append(args, opts.nodeArgs(h)...)
		if args, err = o.certified(ca.Node, h.ID(), args); err == nil {
			var wrap []string
			if opts.Wrap != nil {
				wrap = opts.Wrap(h)
			}
			o.nodeArgv[h], o.nodeWrap[h] = args, wrap
			err = o.startWrapped(h, "node", wrap, args)
		}
		if err != nil {
			o.Stop()
			return nil, err
		}
		o.nodeCmd[h] = o.procs[len(o.procs)-1]
		o.nodes = append(o.nodes, h)
	}
	if err := o.waitAgents(o.nodes); err != nil {
		o.Stop()
		return nil, err
	}
	if opts.VIP {
		if err := o.waitVIP(ctx); err != nil {
			o.Stop()
			return nil, err
		}
	}
	return o, nil
}

// LogFile is the log of the overlay's hub or node (role) on host h.
func LogFile(h *topology.Host, role string) string {
	return filepath.Join(lab.StateDir, fmt.Sprintf("gridlink-%s-%s.log", h.ID(), role))
}

func (o *Overlay) start(h *topology.Host, role string, args []string) error {
	return o.startWrapped(h, role, nil, args)
}

// startWrapped starts gridlink ROLE ARGS on h under the command line wrap
// (none if nil).
func (o *Overlay) startWrapped(h *topology.Host, role string, wrap, args []string) error {
	return o.startLogged(h, role, wrap, args, os.O_TRUNC)
}

// startLogged is startWrapped with the log file opened with flag
// (os.O_TRUNC, or os.O_APPEND for a restart).
func (o *Overlay) startLogged(h *topology.Host, role string, wrap, args []string, flag int) error {
	logPath := LogFile(h, role)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|flag, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	argv := append(append(append([]string{"netns", "exec", lab.HostNS(h)}, wrap...), o.bin), args...)
	cmd := exec.Command("ip", argv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start gridlink %s on %s: %w", role, h.ID(), err)
	}
	o.procs = append(o.procs, cmd)
	return nil
}

// agentWait bounds the wait for a node agent to answer after its start.
const agentWait = 20 * time.Second

// waitAgents waits until the node agent on each of hs answers status,
// all at once: an agent that does not within agentWait is an error
// showing its log.
func (o *Overlay) waitAgents(hs []*topology.Host) error {
	errs := make([]error, len(hs))
	var wg sync.WaitGroup
	for i, h := range hs {
		wg.Go(func() {
			deadline := time.Now().Add(agentWait)
			for {
				if _, err := o.run(context.Background(), h, "status", "--json"); err == nil {
					return
				}
				if time.Now().After(deadline) {
					log, _ := os.ReadFile(LogFile(h, "node"))
					errs[i] = fmt.Errorf("gridlink node on %s did not come up in %v:\n%s", h.ID(), agentWait, log)
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// run runs a gridlink command on host h and returns its output.
func (o *Overlay) run(ctx context.Context, h *topology.Host, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", lab.HostNS(h), o.bin}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%v: %s", err, bytes.TrimSpace(errb.Bytes()))
	}
	return out.Bytes(), nil
}

// KillHub kills the hub of site abruptly, as a crash would.
func (o *Overlay) KillHub(site string) error {
	c := o.hubs[site]
	if c == nil {
		return fmt.Errorf("no hub for site %s", site)
	}
	return c.Process.Kill()
}

// HubStatus is what the hub of site says about itself (routes, links,
// nodes), or why that could not be asked, and the tail of its log; for
// test failure reports.
func (o *Overlay) HubStatus(ctx context.Context, site string) string {
	s := o.t.Site(site)
	if s == nil {
		return "no site " + site
	}
	h := HubHost(s)
	out, err := o.run(ctx, h, "status", "--hub")
	if err != nil {
		out = fmt.Appendf(out, "(%v)\n", err)
	}
	log, _ := os.ReadFile(filepath.Join(lab.StateDir, fmt.Sprintf("gridlink-%s-hub.log", h.ID())))
	if len(log) > 4000 {
		log = log[len(log)-4000:]
	}
	return fmt.Sprintf("%s--- log (tail) ---\n%s", out, log)
}

// WaitStable waits, at most max, until no hub's routes have changed their
// hop counts for quiet: the overlay has settled (links spliced, routes
// converged). It reports whether it settled.
func (o *Overlay) WaitStable(ctx context.Context, quiet, max time.Duration) bool {
	deadline := time.Now().Add(max)
	last, since := "", time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var b strings.Builder
		for _, s := range o.t.Sites {
			if _, ok := o.hubs[s.Name]; !ok {
				continue
			}
			hops, err := o.HubHops(ctx, HubHost(s))
			if err != nil {
				fmt.Fprintf(&b, "%s: %v;", s.Name, err)
				continue
			}
			names := make([]string, 0, len(hops))
			for n := range hops {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				fmt.Fprintf(&b, "%s>%s=%d;", s.Name, n, hops[n])
			}
		}
		if cur := b.String(); cur != last {
			last, since = cur, time.Now()
		} else if time.Since(since) >= quiet {
			return true
		}
		time.Sleep(500 * time.Millisecond)
	}
	return false
}

// HubLog is the tail of the log of the hub on host h.
func (o *Overlay) HubLog(h *topology.Host) string {
	log, _ := os.ReadFile(filepath.Join(lab.StateDir, fmt.Sprintf("gridlink-%s-hub.log", h.ID())))
	if len(log) > 3000 {
		log = log[len(log)-3000:]
	}
	return string(log)
}

// Run runs a gridlink command on host h.
func (o *Overlay) Run(ctx context.Context, h *topology.Host, args ...string) ([]byte, error) {
	return o.run(ctx, h, args...)
}

// Stop ends the hubs and agents.
func (o *Overlay) Stop() {
	for _, c := range o.procs {
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range o.procs {
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
	}
	o.procs = nil
}

// cachedDials is how many cached connections Ping sets up after the fresh
// one. Their median is reported: on a round trip of a fraction of a
// millisecond through the userspace link emulator, single setups and echo
// round trips spread by a factor of two or more, and the median of four
// still strayed past a bound its typical value kept well within.
const cachedDials = 10

// Ping measures one pair: a fresh (uncached) connection, then cachedDials
// cached ones, each used for three echo round trips.
func (o *Overlay) Ping(ctx context.Context, src, dst *topology.Host) GridlinkResult {
	out, err := o.run(ctx, src, "ping", "--json", "--fresh", "--dials", fmt.Sprint(1+cachedDials), "--count", "3", dst.ID())
	var pr status.Ping
	if jerr := json.Unmarshal(out, &pr); jerr != nil {
		if err == nil {
			err = jerr
		}
		return GridlinkResult{Error: err.Error()}
	}
	r := GridlinkResult{Method: pr.Method, Error: pr.Error}
	if len(pr.SetupMS) == 1+cachedDials && pr.Error == "" {
		r.OK, r.FirstMS, r.CachedMS, r.Cached = true, pr.SetupMS[0], median(pr.SetupMS[1:]), pr.Methods[1]
		for _, m := range pr.Methods[1:] {
			if m != r.Cached {
				r.Cached = "mixed"
			}
		}
	}
	if len(pr.RTTMS) > 0 {
		r.RTTMS = median(pr.RTTMS)
	}
	return r
}

// Reaches says whether src sets up one connection to dst, and if not, why.
func (o *Overlay) Reaches(ctx context.Context, src, dst *topology.Host) (bool, string) {
	out, err := o.run(ctx, src, "ping", "--json", "--dials", "1", "--count", "1", dst.ID())
	var pr status.Ping
	if jerr := json.Unmarshal(out, &pr); jerr != nil {
		if err == nil {
			err = jerr
		}
		return false, err.Error()
	}
	return pr.Error == "" && len(pr.SetupMS) == 1, pr.Error
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[n/2]
}

// AddGridlink measures every pair of m through the overlay. It first waits,
// for all sources at once, until every source has reached every target of
// its pairs once (hubs need a few gossip rounds to find each other); then it measures
// the pairs one at a time, so that setup times are not inflated by other
// measurements competing for the CPU.
func (o *Overlay) AddGridlink(ctx context.Context, m *Matrix, settle time.Duration) {
	var wg sync.WaitGroup
	deadline := time.Now().Add(settle)
	targets := map[string][]*topology.Site{}
	for _, p := range m.Pairs {
		targets[p.Src] = append(targets[p.Src], o.t.Site(p.Dst))
	}
	for _, src := range o.t.Sites {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, dst := range targets[src.Name] {
				for dst != src && time.Now().Before(deadline) {
					if ok, _ := o.Reaches(ctx, src.MatrixHost(), dst.MatrixHost()); ok {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	// and the hub overlay settled: hubs that cannot reach each other
	// splice links in the first seconds, which changes routes.
	o.WaitStable(ctx, 3*time.Second, time.Until(deadline))
	for i := range m.Pairs {
		p := &m.Pairs[i]
		r := o.Ping(ctx, o.t.Site(p.Src).MatrixHost(), o.t.Site(p.Dst).MatrixHost())
		p.Gridlink = &r
	}
	m.Summary.GridlinkOK = new(int)
	for _, p := range m.Pairs {
		if p.Gridlink != nil && p.Gridlink.OK {
			*m.Summary.GridlinkOK++
		}
	}
}
