package hubserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
)

// The scale harness's nodes run in a child process (the test binary
// re-executed with scaleNodesEnv set to the hubs' loopback TCP addresses,
// comma-separated), so that the hubs' process holds hubs only. It reads
// commands on stdin and answers each with one line on stdout, "ok ..."
// or "err ...":
//
//	attach N        attach N more nodes, node k to hub k mod hubs
//	lookup K        K lookups, one at a time, each of a node at another hub
//	                by name, from a random node: times in µs
//	setup K         K circuits, one at a time, each to a node at another
//	                hub: open, one byte there and back (times in µs), close
//	circuits K      open K circuits (held open) between nodes at different hubs
//	uncircuit       close them
//	churn R D       for D, R times a second: a random node leaves, a new one
//	                attaches at a random hub
//	count           how many sessions are attached
const scaleNodesEnv = "GRIDLINK_SCALE_NODES"

// scaleNode is one node of the child process.
type scaleNode struct {
	s   *hub.Session
	hub int
}

// nodeFleet is the child's nodes.
type nodeFleet struct {
	hubs     []string
	mu       sync.Mutex
	nodes    []*scaleNode
	named    int // names handed out
	circuits []*hub.Circuit
	rng      *rand.Rand
	keys     chan *pki.Credentials
}

func runScaleNodes() {
	f := &nodeFleet{hubs: strings.Split(os.Getenv(scaleNodesEnv), ","), rng: rand.New(rand.NewPCG(1, 2)), keys: make(chan *pki.Credentials, 64)}
	go func() { // keys are made ahead, off the attach's clock
		for {
			k, _ := identity.NewKey()
			c, _ := pki.NewCredentials(k)
			f.keys <- c
		}
	}()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		w := strings.Fields(in.Text())
		if len(w) == 0 {
			continue
		}
		arg := func(i int) int {
			if i < len(w) {
				n, _ := strconv.Atoi(w[i])
				return n
			}
			return 0
		}
		var out string
		switch w[0] {
		case "attach":
			out = f.attach(arg(1))
		case "lookup":
			out = f.timed(arg(1), f.lookupOne)
		case "setup":
			out = f.timed(arg(1), f.setupOne)
		case "circuits":
			out = f.openCircuits(arg(1))
		case "uncircuit":
			for _, c := range f.circuits {
				c.Close()
			}
			f.circuits = nil
			out = "ok"
		case "churn":
			d, _ := time.ParseDuration(w[2])
			out = f.churn(arg(1), d)
		case "count":
			n := 0
			f.mu.Lock()
			for _, nd := range f.nodes {
				if nd.s.NotAttached() == nil {
					n++
				}
			}
			f.mu.Unlock()
			out = fmt.Sprintf("ok attached=%d", n)
		default:
			out = "err unknown command " + w[0]
		}
		fmt.Println(out)
	}
	os.Exit(0)
}

// add attaches one new node to hub i and serves an echo on port 7.
func (f *nodeFleet) add(i int) error {
	f.mu.Lock()
	name := fmt.Sprintf("n%06d", f.named)
	f.named++
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := hub.Attach(ctx, hub.SessionConfig{Creds: <-f.keys, Machine: identity.Machine{Name: name}, Hubs: []string{f.hubs[i]}, Logf: func(string, ...any) {}})
	if err != nil {
		return err
	}
	go func() {
		for in := range s.Incoming() {
			if in.Accept() == nil {
				go func(c *hub.Circuit) { io.Copy(c, c); c.Close() }(in.Circuit)
			}
		}
	}()
	f.mu.Lock()
	f.nodes = append(f.nodes, &scaleNode{s: s, hub: i})
	f.mu.Unlock()
	return nil
}

func (f *nodeFleet) attach(n int) string {
	start := time.Now()
	var next, failed atomic.Int64
	var last atomic.Value
	base := len(f.nodes)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1)) - 1
				if k >= n {
					return
				}
				if err := f.add((base + k) % len(f.hubs)); err != nil {
					failed.Add(1)
					last.Store(err.Error())
				}
			}
		}()
	}
	wg.Wait()
	out := fmt.Sprintf("ok ms=%d failed=%d", time.Since(start).Milliseconds(), failed.Load())
	if e, ok := last.Load().(string); ok {
		out += " last=" + strconv.Quote(e)
	}
	return out
}

// pair picks two nodes at different hubs.
func (f *nodeFleet) pair() (a, b *scaleNode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		a, b = f.nodes[f.rng.IntN(len(f.nodes))], f.nodes[f.rng.IntN(len(f.nodes))]
		if a.hub != b.hub {
			return a, b
		}
	}
}

func (f *nodeFleet) lookupOne() (time.Duration, error) {
	a, b := f.pair()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := a.s.Lookup(ctx, b.s.Machine().Name)
	return time.Since(start), err
}

func (f *nodeFleet) setupOne() (time.Duration, error) {
	a, b := f.pair()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	c, err := a.s.Open(ctx, b.s.Machine(), 7)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte{1}); err != nil {
		return 0, err
	}
	var one [1]byte
	if _, err := io.ReadFull(c, one[:]); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// timed runs fn k times, one at a time, and gives the median, 90th
// percentile and largest time in µs.
func (f *nodeFleet) timed(k int, fn func() (time.Duration, error)) string {
	var ds []time.Duration
	failed := 0
	var last error
	for range k {
		d, err := fn()
		if err != nil {
			failed++
			last = err
			continue
		}
		ds = append(ds, d)
	}
	if len(ds) == 0 {
		return fmt.Sprintf("err all %d failed: %v", k, last)
	}
	slices.Sort(ds)
	out := fmt.Sprintf("ok p50=%d p90=%d max=%d failed=%d", ds[len(ds)/2].Microseconds(), ds[len(ds)*9/10].Microseconds(), ds[len(ds)-1].Microseconds(), failed)
	if last != nil {
		out += " last=" + strconv.Quote(last.Error())
	}
	return out
}

func (f *nodeFleet) openCircuits(k int) string {
	failed := 0
	for range k {
		a, b := f.pair()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := a.s.Open(ctx, b.s.Machine(), 7)
		cancel()
		if err == nil {
			var one [1]byte
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err = c.Write([]byte{1}); err == nil {
				_, err = io.ReadFull(c, one[:])
			}
			_ = c.SetDeadline(time.Time{})
		}
		if err != nil {
			failed++
			continue
		}
		f.circuits = append(f.circuits, c)
	}
	return fmt.Sprintf("ok open=%d failed=%d", len(f.circuits), failed)
}

// churn makes r nodes a second leave and as many new ones join, for d.
func (f *nodeFleet) churn(r int, d time.Duration) string {
	var joined, failed atomic.Int64
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(max(r, 1)))
	defer tick.Stop()
	end := time.After(d)
	for done := false; !done; {
		select {
		case <-end:
			done = true
		case <-tick.C:
			f.mu.Lock()
			k := f.rng.IntN(len(f.nodes))
			old := f.nodes[k]
			f.nodes = slices.Delete(f.nodes, k, k+1)
			i := f.rng.IntN(len(f.hubs))
			f.mu.Unlock()
			old.s.Close()
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f.add(i); err != nil {
					failed.Add(1)
				} else {
					joined.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	return fmt.Sprintf("ok joined=%d failed=%d", joined.Load(), failed.Load())
}

// fleet is the parent's handle on the child process of nodes.
type fleet struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func startFleet(t testing.TB, hubs []string) *fleet {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), scaleNodesEnv+"="+strings.Join(hubs, ","))
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewScanner(stdout)
	out.Buffer(nil, 1<<20)
	f := &fleet{t: t, cmd: cmd, stdin: stdin, out: out}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	return f
}

// do sends one command and returns its answer's fields (key=value).
func (f *fleet) do(cmd string) map[string]string {
	f.t.Helper()
	fmt.Fprintln(f.stdin, cmd)
	if !f.out.Scan() {
		f.t.Fatalf("nodes process: no answer to %q", cmd)
	}
	line := f.out.Text()
	if !strings.HasPrefix(line, "ok") {
		f.t.Fatalf("nodes process: %s: %s", cmd, line)
	}
	m := map[string]string{"line": line}
	for _, kv := range strings.Fields(line)[1:] {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func (f *fleet) pid() int { return f.cmd.Process.Pid }
