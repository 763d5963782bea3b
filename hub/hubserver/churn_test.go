package hubserver

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gridlink/gridlink/internal/memnet"
	"github.com/gridlink/gridlink/internal/testwait"
)

// logCounter counts a hub's log lines (and keeps them for the report).
type logCounter struct {
	mu    sync.Mutex
	lines []string
}

func (l *logCounter) logf(f string, a ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(f, a...))
	l.mu.Unlock()
}

func (l *logCounter) count(sub string) (n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// Two hubs configured as each other's peers stay quiet once linked:
// here the larger-ID hub dials only once the other's link to it is up, so
// the other drops the new one as a duplicate (before its hello). The
// dialler must learn whom it reached and stop, not redial every 5 s
// (issue 17, item 9: the peer logged "already linked ... dropping the
// duplicate link" 12 times a minute, forever). The hubs run on an
// in-memory network in a synctest bubble: 15 s of synthetic time, and
// exactly one duplicate dropped.
func TestPeersLinkQuietly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Last (the first cleanup runs last): the trunks' closing
		// goroutines (CloseAfterFlush) sleep too, and a bubble ends only
		// once every goroutine has.
		t.Cleanup(func() { time.Sleep(time.Minute) })
		ctx, cancel := context.WithCancel(context.Background())
		var network memnet.Network
		var logS, logL logCounter
		cs, cl := creds(t), creds(t)
		if minID(cs.Key.ID(), cl.Key.ID()) != cs.Key.ID() {
			cs, cl = cl, cs
		}
		listen := func() net.Listener {
			ln, err := network.Listen("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			return ln
		}
		s, err := New(Config{Name: "s", Creds: cs, Listener: listen(), Interval: testInterval, Logf: logS.logf, Dial: network.Dial})
		if err != nil {
			t.Fatal(err)
		}
		l, err := New(Config{Name: "l", Creds: cl, Listener: listen(), Interval: testInterval, Logf: logL.logf,
			Peers: []string{s.Addr().String()}})
		if err != nil {
			t.Fatal(err)
		}
		s.cfg.Peers = []string{l.Addr().String()}
		l.cfg.Dial = func(ctx context.Context, spec string) (net.Conn, error) {
			for !l.linkedTo(s.id) && sleepCtx(ctx, 10*time.Millisecond) {
			}
			return network.Dial(ctx, spec)
		}
		var wg sync.WaitGroup
		for _, h := range []*Hub{s, l} {
			wg.Add(1)
			go func() { defer wg.Done(); h.Serve(ctx) }()
		}
		defer wg.Wait()
		defer cancel()
		time.Sleep(15 * time.Second)
		if !s.linkedTo(l.id) || !l.linkedTo(s.id) {
			t.Fatal("the hubs are not linked")
		}
		if n := logS.count("already linked"); n != 1 {
			t.Errorf("s dropped %d duplicate links from l in 15 s, want the one; logs:\ns: %q\nl: %q", n, logS.lines, logL.lines)
		}
	})
}

// A hub that restarts with a new key supersedes its old identity's
// route: the other hubs forget the unreachable row at once instead of
// listing it until it expires (issue 17, item 9: status --hub kept
// "unreachable 255" rows).
func TestRestartedHubSupersedesOldRoute(t *testing.T) {
	g := newGrid(t)
	g.hub("a")
	g.hub("b", "a")
	old := g.hub("c", "a")
	oldID := old.id
	for _, n := range []string{"a", "b"} {
		h := g.get(n)
		testwait.Until(t, n+" reaches c", 10*time.Second, func() bool { return h.nextHop(oldID) != nil })
	}
	old.crash()
	g.mu.Lock()
	delete(g.hubs, "c")
	g.mu.Unlock()
	c := g.hub("c", "a") // the same hub, restarted with a fresh key
	for _, n := range []string{"a", "b"} {
		h := g.get(n)
		testwait.Until(t, n+" reaches the new c", 10*time.Second, func() bool { return h.nextHop(c.id) != nil })
	}
	for _, n := range []string{"a", "b"} {
		h := g.get(n)
		testwait.Until(t, n+" forgets the old c", 2*time.Second, func() bool {
			for _, r := range h.Routes() {
				if r.Hub == oldID {
					return false
				}
			}
			return true
		})
	}
}

// A hub that cannot splice a link to another (here the other has
// splicing off) logs it once, not at every retry (issue 17, item 9: hubs
// retried splices to hubs that are not neighbours, logging each).
func TestSpliceFailureLoggedOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var logA logCounter
	ca, cc := creds(t), creds(t)
	if ca.Key.ID().String() > cc.Key.ID().String() {
		ca, cc = cc, ca // a offers (the smaller ID)
	}
	b, err := New(Config{Name: "b", Creds: creds(t), Listen: "127.0.0.1:0", Interval: testInterval, Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Name: "c", Creds: cc, Listen: "127.0.0.1:0", Interval: testInterval, Logf: func(string, ...any) {},
		Peers: []string{b.Addr().String()}, NoSplice: true})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Name: "a", Creds: ca, Listen: "127.0.0.1:0", Interval: testInterval, Logf: logA.logf,
		Peers: []string{b.Addr().String()},
		Dial: func(ctx context.Context, spec string) (net.Conn, error) {
			if spec == c.Addr().String() {
				return nil, fmt.Errorf("dial %s: blocked by the test firewall", spec)
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", spec)
		}})
	if err != nil {
		t.Fatal(err)
	}
	c.cfg.Dial = func(ctx context.Context, spec string) (net.Conn, error) {
		if spec == a.Addr().String() {
			return nil, fmt.Errorf("dial %s: blocked by the test firewall", spec)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", spec)
	}
	var wg sync.WaitGroup
	for _, h := range []*Hub{b, c, a} {
		wg.Add(1)
		go func() { defer wg.Done(); h.Serve(ctx) }()
	}
	defer wg.Wait()
	defer cancel()
	time.Sleep(17 * time.Second) // real time: a's splice probes its NAT and punches on real sockets (nat.Probe, nat.Punch)
	// Each reason once: the first offer may go unanswered while routes
	// settle (a reason of its own), then c's refusal is logged once
	// though a retries it (before the fix: at every retry, 3 in 17 s).
	logA.mu.Lock()
	reasons := map[string]int{}
	for _, l := range logA.lines {
		if _, r, ok := strings.Cut(l, "splice a link to c: "); ok {
			r, _, _ = strings.Cut(r, " (retrying")
			reasons[r]++
		}
	}
	logA.mu.Unlock()
	if len(reasons) == 0 {
		t.Errorf("a never logged its failed splice to c; logs:\n%q", logA.lines)
	}
	for r, n := range reasons {
		if n > 1 {
			t.Errorf("a logged %q %d times in 17 s, want once; logs:\n%q", r, n, logA.lines)
		}
	}
}
