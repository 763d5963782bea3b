package vconn

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/status"
)

// What a node counts for its metrics (Counters): bytes by method, setup
// attempts by method and outcome, and the setup times of the connections
// it dialled. Each count is an atomic add where it happens (a Read or
// Write of a connection: one add; a setup: a few), read at once by
// Counters.

// countedMethods are the methods counted, in rank order (status.Path*).
var countedMethods = [...]Method{Direct, Reverse, Splice, Routed}

// methodIndex is m's index in countedMethods, or -1.
func methodIndex(m Method) int {
	switch m {
	case Direct:
		return 0
	case Reverse:
		return 1
	case Splice:
		return 2
	case Routed:
		return 3
	}
	return -1
}

// outcomes of a setup attempt, indexed as the counters are.
var outcomes = [...]string{status.SetupOK, status.SetupFailed, status.SetupRefused, status.SetupCanceled}

const (
	outcomeOK = iota
	outcomeFailed
	outcomeRefused
	outcomeCanceled
)

// setupBuckets are the setup-time histogram's upper bounds, in seconds:
// from a loopback dial (sub-millisecond) to a splice across continents.
var setupBuckets = [...]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// pathCounter counts one method's bytes, padded to its own cache line so
// that connections of different methods do not share one.
type pathCounter struct {
	sent, received atomic.Uint64
	_              [48]byte
}

// connCounter counts one connection's bytes, each direction on its own
// cache line (a connection is read and written from different
// goroutines).
type connCounter struct {
	sent     atomic.Uint64
	_        [56]byte
	received atomic.Uint64
	_        [56]byte
}

// setupTimes is one method's setup-time histogram: per-bucket counts (not
// cumulative; the last is above every bound) and the sum in nanoseconds.
type setupTimes struct {
	buckets [len(setupBuckets) + 1]atomic.Uint64
	sumNS   atomic.Int64
}

func (h *setupTimes) observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(setupBuckets) && s > setupBuckets[i] {
		i++
	}
	h.buckets[i].Add(1)
	h.sumNS.Add(int64(d))
}

// counters are a node's (Node.counts).
type counters struct {
	paths  [len(countedMethods)]pathCounter
	setups [len(countedMethods)][len(outcomes)]atomic.Uint64
	times  [len(countedMethods)]setupTimes
}

// path is the byte counter of method m (nil for a method not counted).
func (c *counters) path(m Method) *pathCounter {
	if i := methodIndex(m); i >= 0 {
		return &c.paths[i]
	}
	return nil
}

// setupDone counts an attempt of method m that ended with err (after
// classify) while ctx was the attempt's.
func (c *counters) setupDone(ctx context.Context, m Method, err error) {
	i := methodIndex(m)
	if i < 0 {
		return
	}
	o := outcomeOK
	switch {
	case err == nil:
	case errors.Is(err, direct.ErrRefused):
		o = outcomeRefused
	case ctx.Err() != nil:
		o = outcomeCanceled
	default:
		o = outcomeFailed
	}
	c.setups[i][o].Add(1)
}

// dialled records the setup time of a connection this node dialled.
func (c *counters) dialled(m Method, d time.Duration) {
	if i := methodIndex(m); i >= 0 {
		c.times[i].observe(d)
	}
}

// Counters returns what the node counted since it started: its virtual
// connections' bytes and open count by method (status.Path*; the
// virtual network's path is not counted here), its setup attempts by
// method and outcome, and the setup times of the connections it dialled.
func (n *Node) Counters() status.NodeCounters {
	open := [len(countedMethods)]int{}
	n.conns.mu.Lock()
	for c := range n.conns.set {
		if i := methodIndex(c.method); i >= 0 {
			open[i]++
		}
	}
	n.conns.mu.Unlock()
	var out status.NodeCounters
	for i, m := range countedMethods {
		p := &n.counts.paths[i]
		out.Paths = append(out.Paths, status.PathBytes{Path: string(m), SentBytes: p.sent.Load(), ReceivedBytes: p.received.Load(), Open: open[i]})
		for o, name := range outcomes {
			out.Setups = append(out.Setups, status.SetupCount{Method: string(m), Outcome: name, Count: n.counts.setups[i][o].Load()})
		}
		t := &n.counts.times[i]
		h := status.Histogram{Method: string(m), UpperS: slices.Clone(setupBuckets[:]), Counts: make([]uint64, len(setupBuckets))}
		for b := range t.buckets {
			h.Count += t.buckets[b].Load()
			if b < len(setupBuckets) {
				h.Counts[b] = h.Count
			}
		}
		h.SumS = time.Duration(t.sumNS.Load()).Seconds()
		out.SetupTimes = append(out.SetupTimes, h)
	}
	return out
}
