package xfer

import (
	"sync/atomic"

	"github.com/gridlink/gridlink/status"
)

// What a Server counts for metrics (Counters): sessions by operation and
// outcome, and their files and bytes, added as each session ends (a few
// atomic adds per session, none per block).

// countedOps are the operations counted, indexed as the counters are.
var countedOps = [...]uint8{opGet, opPut, opPush}

// opCounter counts one operation's sessions with one outcome.
type opCounter struct {
	sessions, files, failed, sent, kept atomic.Uint64
}

// serverCounters are a Server's: [op][0 ok, 1 failed].
type serverCounters [len(countedOps)][2]opCounter

// ended counts a session of op that ended with err and did sum.
func (c *serverCounters) ended(op uint8, sum Summary, err error) {
	i := -1
	for j, o := range countedOps {
		if o == op {
			i = j
		}
	}
	if i < 0 {
		return
	}
	oc := &c[i][0]
	if err != nil {
		oc = &c[i][1]
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
			oc := &s.counts[i][o]
			out.Ops = append(out.Ops, status.TransferOp{Op: opName(op), Outcome: outcome, Sessions: oc.sessions.Load(),
				Files: oc.files.Load(), Failed: oc.failed.Load(), SentBytes: oc.sent.Load(), KeptBytes: oc.kept.Load()})
		}
	}
	return out
}
