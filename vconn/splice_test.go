package vconn

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/internal/testwait"
)

// A wrong prediction (a hub that lied about the observed endpoint, or a
// NAT that changed its mapping mid-attempt) makes the splice fail with a
// clear error, and the race falls back to routed; the listener never sees
// the failed attempt.
func TestSpliceWrongPrediction(t *testing.T) {
	h := testHub(t, "site")
	a := testNode(t, "a", h, Splice, Routed)
	b := testNode(t, "b", h, Splice, Routed)
	b.testPredict = func(eps []netip.AddrPort) []netip.AddrPort {
		out := make([]netip.AddrPort, len(eps))
		for i, ep := range eps {
			out[i] = netip.AddrPortFrom(ep.Addr(), ep.Port()^0x4000) // somewhere else
		}
		return out
	}
	accepted := serveEcho(t, b, 7000)
	waitResolvable(t, a, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	start := time.Now()
	c, err := a.Dial(ctx, "b:7000")
	if err != nil {
		t.Fatal(err)
	}
	if c.Method() != Routed {
		t.Errorf("method %s, want routed after the splice failed", c.Method())
	}
	echoCheck(t, c, 1000)
	c.Close()
	t.Logf("fell back to routed in %v (routed starts after 2 head starts of 200 ms here)", time.Since(start))

	// the failure is remembered for the site: splicing sits out the next
	// races there.
	bm, err := a.Resolve(ctx, mustAddr(t, "b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.possible(Splice, bm); err == nil || !strings.Contains(err.Error(), "splicing to site site failed") {
		t.Errorf("after a failed splice: %v", err)
	}
	// splice alone: the error says what happened, in plain words too.
	a.ForgetCache()
	bm, err = a.Resolve(ctx, mustAddr(t, "b"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Try(ctx, Splice, bm, 7000)
	if err == nil || !strings.Contains(err.Error(), "splice") || !errors.Is(err, errPunch) {
		t.Fatalf("splice with a wrong prediction: %v", err)
	}
	if why := Explain(Splice, err, a.Facts(bm)); !strings.Contains(why, "SYNs did not get through") {
		t.Errorf("explanation %q", why)
	}
	time.Sleep(100 * time.Millisecond) // nothing more arrives (real sockets: no synthetic time)
	if n := accepted.Load(); n != 1 {
		t.Errorf("listener accepted %d connections, want only the routed one", n)
	}
}

func mustAddr(t *testing.T, s string) identity.Addr {
	t.Helper()
	a, err := identity.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Between nodes of two linked hubs the splice's first attempt answers
// early (nat.Reply.Early: the target connects half the hubs' round trip
// after its reply, the dialler on the reply, no go): the connection is
// made, carries data, and the target logged the early answer.
func TestSpliceEarly(t *testing.T) {
	h1 := testHub(t, "one")
	h2 := testHub(t, "two", h1.Addr().String())
	var early atomic.Int32
	b, err := Start(context.Background(), Config{Name: "b", Methods: []Method{Splice}, ListenAddr: "127.0.0.1", Hubs: []string{h2.Addr().String()},
		Logf: func(format string, args ...any) {
			if strings.Contains(fmt.Sprintf(format, args...), "answering early") {
				early.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	a := testNode(t, "a", h1, Splice)
	a.spliceEarlyMin = 0 // loopback's round trips
	serveEcho(t, b, 7000)
	waitResolvable(t, a, "b")
	// until the hubs' routes to each other carry their latency
	testwait.Until(t, "a's hub to know b's one hop away", 10*time.Second, func() bool {
		return a.spliceRTT(context.Background(), b.Machine()) > 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := a.Dial(ctx, "b:7000")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Method() != Splice {
		t.Fatalf("method %s, want splice", c.Method())
	}
	echoCheck(t, c, 100<<10)
	if early.Load() == 0 {
		t.Error("the target did not answer early")
	}
}

// Below spliceEarlyMin a splice is not answered early: its timing margin
// would be within scheduling delays (CI: a rejecting NAT reset early
// SYNs at 0.2 ms).
func TestSpliceNotEarlyOnShortTrips(t *testing.T) {
	h1 := testHub(t, "one")
	h2 := testHub(t, "two", h1.Addr().String())
	b := testNode(t, "b", h2, Splice)
	a := testNode(t, "a", h1, Splice)
	a.spliceEarlyMin = 0
	waitResolvable(t, a, "b")
	testwait.Until(t, "a's hub to know b's one hop away", 10*time.Second, func() bool {
		return a.spliceRTT(context.Background(), b.Machine()) > 0
	})
	a.spliceEarlyMin = spliceEarlyMin
	if rtt := a.spliceRTT(context.Background(), b.Machine()); rtt != 0 {
		t.Errorf("a splice over hubs %v apart is answered early, want not below %v", rtt, spliceEarlyMin)
	}
}

// A dialler whose dial ends after its splice offer went out and before
// its go (the race won another way, or the caller gave up) calls the
// splice off: the target, holding a port for the go, stops waiting at
// once (not after its 10 s) and logs why, naming the dialler.
func TestSpliceCalledOff(t *testing.T) {
	h := testHub(t, "site")
	a := testNode(t, "a", h, Splice)
	logs := make(chan string, 64)
	b, err := Start(context.Background(), Config{Name: "b", Methods: []Method{Splice}, ListenAddr: "127.0.0.1", Hubs: []string{h.Addr().String()},
		Logf: func(format string, args ...any) {
			select {
			case logs <- fmt.Sprintf(format, args...):
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	serveEcho(t, b, 7000)
	waitResolvable(t, a, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bm, err := a.Resolve(ctx, mustAddr(t, "b"))
	if err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithCancel(ctx)
	var ended atomic.Int64 // when the dial ended, ns since start
	start := time.Now()
	b.testPredict = func(eps []netip.AddrPort) []netip.AddrPort {
		// b holds its port now: the dial ends before b's reply comes
		dcancel()
		ended.Store(int64(time.Since(start)))
		time.Sleep(100 * time.Millisecond)
		return eps
	}
	if _, err := a.Try(dctx, Splice, bm, 7000); !errors.Is(err, context.Canceled) {
		t.Fatalf("splice dial cancelled under way: %v", err)
	}
	deadline := time.After(5 * time.Second)
	for {
		select {
		case line := <-logs:
			if !strings.Contains(line, "no go will come") {
				continue
			}
			took := time.Since(start) - time.Duration(ended.Load())
			t.Logf("b: %s (%v after the dial ended)", line, took.Round(time.Millisecond))
			if !strings.Contains(line, "a called the splice off") || !strings.Contains(line, "context canceled") {
				t.Errorf("b's words do not name the dialler and why: %q", line)
			}
			return
		case <-deadline:
			t.Fatal("b still waits for the go 5 s after the dial ended")
		}
	}
}
