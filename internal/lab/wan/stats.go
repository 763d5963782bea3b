package wan

import (
	"fmt"
	"sync/atomic"
	"time"
)

// PipeStats are the counters of one ordered pair of sites. Packets are wire
// packets: a GSO batch counts as the segments it stands for.
type PipeStats struct {
	From, To    string
	Link        Link   // parameters in force for this direction
	Packets     uint64 // forwarded into the destination device
	Bytes       uint64 // IP bytes forwarded
	LossDrops   uint64 // dropped by the random loss stage
	QueueDrops  uint64 // tail-dropped by the queue (or the delay line's hard cap)
	WriteErrors uint64 // the destination device refused a packet (e.g. it is down)
	Batches     uint64 // GSO batches forwarded intact (their segments are in Packets)
	InFlight    int    // packets held in the pipe right now

	// How far actual releases were from the model's release times: the
	// emulator's own scheduling error, without the hosts' stacks. Mean
	// and worst of |actual - scheduled|, and the signed mean (positive:
	// late).
	ReleaseErrMean, ReleaseErrMax, ReleaseBias time.Duration
}

func (s PipeStats) String() string {
	return fmt.Sprintf("%s->%s: %d pkts %d B, drops loss %d queue %d, write errors %d, in flight %d, release error mean %v max %v bias %v",
		s.From, s.To, s.Packets, s.Bytes, s.LossDrops, s.QueueDrops, s.WriteErrors, s.InFlight, s.ReleaseErrMean, s.ReleaseErrMax, s.ReleaseBias)
}

// PortStats are the counters of one site's attachment.
type PortStats struct {
	Name       string
	Received   uint64 // wire packets read from the device
	Bytes      uint64 // IP bytes read
	Unroutable uint64 // packets to an address no port owns, dropped
	Malformed  uint64 // packets that are not IPv4/IPv6 or GSO batches that cannot be cut, dropped
	Looped     uint64 // packets to the site's own prefixes, written straight back
	Err        error  // why the port stopped reading before Close, if it did
}

type pipeCounters struct {
	packets, bytes        atomic.Uint64
	lossDrops, queueDrops atomic.Uint64
	writeErrors, batches  atomic.Uint64
	releases              atomic.Uint64 // writes (a batch is one)
	errSum, errAbsSum     atomic.Int64  // ns
	errMax                atomic.Int64  // ns
}

type portCounters struct {
	received, bytes atomic.Uint64
	unroutable      atomic.Uint64
	malformed       atomic.Uint64
	looped          atomic.Uint64
}

// Stats returns the counters of every ordered pair of distinct sites, in
// port order (From major).
func (e *Emulator) Stats() []PipeStats {
	var out []PipeStats
	for _, row := range e.pipes {
		for _, p := range row {
			if p == nil {
				continue
			}
			p.mu.Lock()
			inflight := p.q.len()
			p.mu.Unlock()
			out = append(out, PipeStats{
				From:          p.from.cfg.Name,
				To:            p.to.cfg.Name,
				Link:          p.link,
				Packets:       p.c.packets.Load(),
				Bytes:         p.c.bytes.Load(),
				LossDrops:     p.c.lossDrops.Load(),
				QueueDrops:    p.c.queueDrops.Load(),
				WriteErrors:   p.c.writeErrors.Load(),
				Batches:       p.c.batches.Load(),
				InFlight:      inflight,
				ReleaseErrMax: time.Duration(p.c.errMax.Load()),
			})
			if n := int64(p.c.releases.Load()); n > 0 {
				out[len(out)-1].ReleaseErrMean = time.Duration(p.c.errAbsSum.Load() / n)
				out[len(out)-1].ReleaseBias = time.Duration(p.c.errSum.Load() / n)
			}
		}
	}
	return out
}

// PortStats returns the counters of every port, in port order.
func (e *Emulator) PortStats() []PortStats {
	out := make([]PortStats, len(e.ports))
	for i, p := range e.ports {
		out[i] = PortStats{
			Name:       p.cfg.Name,
			Received:   p.c.received.Load(),
			Bytes:      p.c.bytes.Load(),
			Unroutable: p.c.unroutable.Load(),
			Malformed:  p.c.malformed.Load(),
			Looped:     p.c.looped.Load(),
		}
		if err := p.err.Load(); err != nil {
			out[i].Err = *err
		}
	}
	return out
}
