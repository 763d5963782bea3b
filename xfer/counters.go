package xfer

import (
	"sync/atomic"

	"github.com/gridlink/gridlink/status"
)

// What a Server counts for metrics (Counters): sessions by operation and
// outcome, and their files and bytes, added as each session ends (a few
// atomic adds per session); and the bytes of gets and puts as they go
// (an atomic add where the session's tally counts them: per block sent,
// per file stored).

// countedOps are the operations counted, indexed as the counters are.
var countedOps = [...]uint8{opGet, opPut, opPush}

// opCounter counts one operation's sessions with one outcome.
type opCounter struct {
	sessions, files, failed, sent, kept atomic.Uint64
}

// serverCounters are a Server's: by operation, the sessions that ended
// ([0] ok, [1] failed), and the bytes its sessions moved as they go.
type serverCounters struct {
	ended [len(countedOps)][2]opCounter
	moved [len(countedOps)]atomic.Uint64
}

// opIndex is op's index in countedOps, or -1.
func opIndex(op uint8) int {
	for j, o := range countedOps {
		if o == op {
			return j
		}
	}
	return -1
}

// movedBy is the live byte count of op's sessions (nil for an op not
// counted).
func (c *serverCounters) movedBy(op uint8) *atomic.Uint64 {
	if i := opIndex(op); i >= 0 {
		return &c.moved[i]
	}
	return nil
}

// end counts a session of op that ended with err and did sum.
func (c *serverCounters) end(op uint8, sum Summary, err error) {
	i := opIndex(op)
	if i < 0 {
		return
	}
	oc := &c.ended[i][0]
	if err != nil {
		oc = &c.ended[i][1]
	}
	oc.sessions.Add(1)
	oc.files.Add(uint64(max(sum.Files, 0)))
	oc.failed.Add(uint64(max(sum.Failed, 0)))
	oc.sent.Add(uint64(max(sum.Sent, 0)))
	oc.kept.Add(uint64(max(sum.Kept, 0)))
}

// Counters returns what the service counted since it started: every
// operation (get, put, push) with either outcome (ok, failed).
func (s *Server) Counters() status.TransferCounters {
	var out status.TransferCounters
	for i, op := range countedOps {
		for o, outcome := range []string{"ok", "failed"} {
			oc := &s.counts.ended[i][o]
			out.Ops = append(out.Ops, status.TransferOp{Op: opName(op), Outcome: outcome, Sessions: oc.sessions.Load(),
				Files: oc.files.Load(), Failed: oc.failed.Load(), SentBytes: oc.sent.Load(), KeptBytes: oc.kept.Load()})
		}
		out.Moved = append(out.Moved, status.TransferMoved{Op: opName(op), Bytes: s.counts.moved[i].Load()})
	}
	return out
}
