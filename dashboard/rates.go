package dashboard

import (
	"sort"
	"sync"
	"time"

	"github.com/gridlink/gridlink/status"
)

// Throughput: the rates the connections view prints and graphs, made
// here from the agent's byte counters (status.Conn's sent and received
// bytes) rather than on the page, so that the rules are tested:
//
//   - a rate is a counter's delta over the time measured between the two
//     readings (when each status answer arrived), never the nominal
//     interval;
//   - readings closer than minRateGap to the last one used are skipped
//     (their delta waits for the next one): a state pushed at once after
//     a change, right after the periodic one, divided a few kilobytes by
//     a few milliseconds into spikes of hundreds of MiB/s;
//   - a counter lower than the last reading (the agent restarted, one of
//     several connections summed under one key closed) is a reset: no
//     rate for that step, the new reading the baseline;
//   - connections with the same local and remote name (a link's parallel
//     streams) are summed under one key, rather than taking turns as the
//     key's one reading, which made the graph jump up and below zero.
const (
	minRateGap   = 500 * time.Millisecond
	rateSpan     = 60 * time.Second // points kept per connection
	maxRatePoint = 120              // and at most this many
)

// ConnRate is the throughput of the agent's connections from one local
// NODE:PORT to one remote NODE:PORT (sent plus received bytes).
type ConnRate struct {
	Key    string `json:"key"` // "LOCAL → REMOTE"
	Local  string `json:"local"`
	Remote string `json:"remote"`
	// BytesPerS is the newest rate, 0 before two readings.
	BytesPerS float64 `json:"bytes_per_s"`
	// Points are the rates of the last minute, the oldest first, each at
	// the end of its step.
	Points []RatePoint `json:"points"`
}

// RatePoint is one step's rate.
type RatePoint struct {
	Time      time.Time `json:"time"`
	BytesPerS float64   `json:"bytes_per_s"`
}

// rates keeps each connection key's last reading and points.
type rates struct {
	mu    sync.Mutex
	conns map[string]*rateSeries
}

type rateSeries struct {
	local, remote string
	at            time.Time // the baseline reading
	bytes         uint64
	points        []RatePoint
}

func newRates() *rates { return &rates{conns: map[string]*rateSeries{}} }

// connKey names the connections of one local and remote end.
func connKey(c status.Conn) string { return c.Local + " → " + c.Remote }

// observe takes the agent's connections as read at at and returns the
// throughput of each key still open, sorted by key.
func (r *rates) observe(at time.Time, conns []status.Conn) []ConnRate {
	sums := map[string]uint64{}
	ends := map[string][2]string{}
	for _, c := range conns {
		k := connKey(c)
		sums[k] += c.SentBytes + c.ReceivedBytes
		ends[k] = [2]string{c.Local, c.Remote}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.conns {
		if _, ok := sums[k]; !ok {
			delete(r.conns, k)
		}
	}
	out := make([]ConnRate, 0, len(sums))
	for k, b := range sums {
		s := r.conns[k]
		if s == nil {
			s = &rateSeries{local: ends[k][0], remote: ends[k][1], at: at, bytes: b}
			r.conns[k] = s
		}
		s.step(at, b)
		cr := ConnRate{Key: k, Local: s.local, Remote: s.remote, Points: append([]RatePoint(nil), s.points...)}
		if n := len(s.points); n > 0 {
			cr.BytesPerS = s.points[n-1].BytesPerS
		}
		out = append(out, cr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// step takes a reading: a point if it is far enough from the baseline
// and the counter did not go down, then the new baseline.
func (s *rateSeries) step(at time.Time, b uint64) {
	dt := at.Sub(s.at)
	switch {
	case dt < minRateGap && b >= s.bytes:
		return // too close: the next reading measures the whole step
	case b >= s.bytes:
		s.points = append(s.points, RatePoint{Time: at, BytesPerS: float64(b-s.bytes) / dt.Seconds()})
	}
	s.at, s.bytes = at, b
	for len(s.points) > 0 && (at.Sub(s.points[0].Time) > rateSpan || len(s.points) > maxRatePoint) {
		s.points = s.points[1:]
	}
}
