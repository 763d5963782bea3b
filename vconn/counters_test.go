package vconn

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/status"
)

// setups is how many setups of method m ended with outcome, as n counted.
func setups(t *testing.T, n *Node, m Method, outcome string) uint64 {
	t.Helper()
	for _, s := range n.Counters().Setups {
		if s.Method == string(m) && s.Outcome == outcome {
			return s.Count
		}
	}
	t.Fatalf("no count of %s setups %s", m, outcome)
	return 0
}

// A node counts its setups by method and outcome (a refused one as
// refused), the setup time of what it dialled, and its connections'
// bytes and open count by method, on both ends.
func TestCounters(t *testing.T) {
	a := startNode(t, Config{Name: "ca", ListenAddr: "127.0.0.1", SpareTTL: -1})
	b := startNode(t, Config{Name: "cb", ListenAddr: "127.0.0.1", SpareTTL: -1})
	l, err := b.Listen(7000)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		io.Copy(c, c)
		c.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := a.DialMachine(ctx, b.Machine(), 7000)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("counted bytes")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, len(msg))); err != nil {
		t.Fatal(err)
	}
	if _, err := a.DialMachine(ctx, b.Machine(), 7001); !errors.Is(err, direct.ErrRefused) {
		t.Fatalf("dial a port nobody listens on: %v; want a refusal", err)
	}
	if got := setups(t, a, Direct, status.SetupOK); got != 1 {
		t.Errorf("%d direct setups ok; want 1", got)
	}
	if got := setups(t, a, Direct, status.SetupRefused); got != 1 {
		t.Errorf("%d direct setups refused; want 1", got)
	}
	ac, bc := a.Counters(), b.Counters()
	if p := ac.Paths[0]; p.Path != status.PathDirect || p.SentBytes != uint64(len(msg)) || p.ReceivedBytes != uint64(len(msg)) || p.Open != 1 {
		t.Errorf("the dialler's direct path: %+v; want %d bytes each way, 1 open", p, len(msg))
	}
	if p := bc.Paths[0]; p.SentBytes != uint64(len(msg)) || p.ReceivedBytes != uint64(len(msg)) {
		t.Errorf("the listener's direct path: %+v; want %d bytes each way", p, len(msg))
	}
	if h := ac.SetupTimes[0]; h.Method != "direct" || h.Count != 1 || h.SumS <= 0 || h.Counts[len(h.Counts)-1] != 1 {
		t.Errorf("the dialler's direct setup times: %+v; want one", h)
	}
	if h := bc.SetupTimes[0]; h.Count != 0 {
		t.Errorf("the listener counted %d setup times; it dialled nothing", h.Count)
	}
	// and each connection its own (for throughput displays)
	if cs := a.Conns(); len(cs) != 1 || cs[0].SentBytes != uint64(len(msg)) || cs[0].ReceivedBytes != uint64(len(msg)) {
		t.Errorf("the dialler's connections: %+v; want one with %d bytes each way", cs, len(msg))
	}
	c.Close()
	if p := a.Counters().Paths[0]; p.Open != 0 {
		t.Errorf("%d direct connections open after Close", p.Open)
	}
}

// Setup times fall into the first bucket whose bound they do not exceed;
// the buckets Counters reports are cumulative.
func TestSetupTimeBuckets(t *testing.T) {
	n := &Node{conns: openConns{set: map[*Conn]struct{}{}}}
	for _, d := range []time.Duration{500 * time.Microsecond, time.Millisecond, 7 * time.Millisecond, time.Minute} {
		n.counts.dialled(Splice, d)
	}
	h := n.Counters().SetupTimes[2]
	if h.Method != "splice" || h.Count != 4 {
		t.Fatalf("%+v", h)
	}
	want := map[float64]uint64{0.001: 2, 0.005: 2, 0.01: 3, 30: 3}
	for i, le := range h.UpperS {
		if w, ok := want[le]; ok && h.Counts[i] != w {
			t.Errorf("bucket le=%v holds %d; want %d", le, h.Counts[i], w)
		}
	}
	if s := h.SumS; s < 60 || s > 60.01 {
		t.Errorf("sum %vs; want about 60.0085", s)
	}
}
