package perf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The receiver's timeline: what the server appends to its answer (after
// the 8-byte count) so that the client can measure the steady rate where
// iperf3 does, at the receiver. A sample counts the bytes the server's
// link received off its connections (ReaderStats.Received: in order or
// held in its reorder buffer), not those the application had read: a link
// striped over several connections delivers in bursts (a block lost on
// one connection holds back what the others carried, up to the reorder
// buffer, 128 MiB on a resumable link), so the application's count over
// a span swings by what the reorder buffer held at its ends; what arrives
// off the connections does not (iperf3 -P N's streams are read each on
// its own, as they arrive). The last sample is the application's count
// at the end, which is all of it. A sender's count over a span also holds
// whatever the buffers on the way (socket buffers, hub queues, a resumable
// link's window) grew by during it: a resumable link's window grows from
// 16 MiB to 128 MiB while it holds the link back, so the sender's count
// ran up to 10% above the link's rate on a 10 s span (issue 20's routed
// bench). Old clients read the count alone and close; a client of an old
// server sees EOF after the count and falls back to the sender's count.
//
// Wire format, after the count, big-endian:
//
//	magic   4 bytes "RXTL"
//	k       uint32  samples, at most maxSamples
//	k times:
//	  at    uint64  nanoseconds since the server read the first byte
//	  bytes uint64  bytes received by then
//
// Samples are in order: at and bytes never decrease.
const (
	timelineMagic  = "RXTL"
	sampleLen      = 16
	maxSamples     = 4096
	sampleInterval = 10 * time.Millisecond // the first; doubles as the run outgrows maxSamples
)

// ErrTimeline is what a malformed receiver's timeline decodes to.
var ErrTimeline = errors.New("perf: malformed receiver timeline")

// sample is the bytes a server had read at a time since its first byte.
type sample struct {
	at    time.Duration
	bytes int64
}

// timeline records a receiver's samples: one per interval at most, the
// interval doubling (every other sample dropped) once maxSamples are kept.
type timeline struct {
	first    time.Time
	every    time.Duration
	next     time.Duration
	samples  []sample
	started  bool
	lastSeen sample
}

// note records, if a sample is due at now, the bytes received by then
// (count: called only then); n is the bytes read by the application,
// which the last sample holds.
func (t *timeline) note(now time.Time, n int64, count func() int64) {
	if !t.started {
		t.first, t.started, t.every = now, true, sampleInterval
		t.samples = append(t.samples, sample{0, max(n, count())})
		t.next = t.every
		return
	}
	at := now.Sub(t.first)
	t.lastSeen = sample{at, n}
	if at < t.next {
		return
	}
	if len(t.samples) == maxSamples {
		kept := t.samples[:0]
		for i := 0; i < len(t.samples); i += 2 {
			kept = append(kept, t.samples[i])
		}
		t.samples = kept
		t.every *= 2
	}
	t.samples = append(t.samples, sample{at, max(n, count(), t.samples[len(t.samples)-1].bytes)})
	t.next = at - at%t.every + t.every
}

// encode returns the wire form, the last byte read included as the last
// sample.
func (t *timeline) encode() []byte {
	ss := t.samples
	if t.started && t.lastSeen.at > ss[len(ss)-1].at {
		if len(ss) == maxSamples {
			ss = ss[:maxSamples-1]
		}
		ss = append(ss, t.lastSeen)
	}
	b := make([]byte, 0, 8+sampleLen*len(ss))
	b = append(b, timelineMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(ss)))
	for _, s := range ss {
		b = binary.BigEndian.AppendUint64(b, uint64(s.at))
		b = binary.BigEndian.AppendUint64(b, uint64(s.bytes))
	}
	return b
}

// decodeTimeline parses a receiver's timeline (the bytes after the count).
func decodeTimeline(b []byte) ([]sample, error) {
	if len(b) < 8 || string(b[:4]) != timelineMagic {
		return nil, fmt.Errorf("%w: %d bytes without its header", ErrTimeline, len(b))
	}
	k := binary.BigEndian.Uint32(b[4:8])
	if k > maxSamples || len(b) != 8+int(k)*sampleLen {
		return nil, fmt.Errorf("%w: %d samples in %d bytes (at most %d)", ErrTimeline, k, len(b), maxSamples)
	}
	ss := make([]sample, k)
	var prev sample
	for i := range ss {
		p := b[8+i*sampleLen:]
		at, n := binary.BigEndian.Uint64(p), binary.BigEndian.Uint64(p[8:])
		if at > 1<<62 || n > 1<<62 {
			return nil, fmt.Errorf("%w: sample %d out of range", ErrTimeline, i)
		}
		ss[i] = sample{time.Duration(at), int64(n)}
		if ss[i].at < prev.at || ss[i].bytes < prev.bytes {
			return nil, fmt.Errorf("%w: sample %d goes back", ErrTimeline, i)
		}
		prev = ss[i]
	}
	return ss, nil
}

// bytesAt is the bytes read by time at, interpolated linearly between the
// samples around it (clamped to the first and last).
func bytesAt(ss []sample, at time.Duration) float64 {
	if at <= ss[0].at {
		return float64(ss[0].bytes)
	}
	for i := 1; i < len(ss); i++ {
		if at <= ss[i].at {
			a, b := ss[i-1], ss[i]
			f := float64(at-a.at) / float64(b.at-a.at)
			return float64(a.bytes) + f*float64(b.bytes-a.bytes)
		}
	}
	return float64(ss[len(ss)-1].bytes)
}

// steadyReceived is the receiver's steady rate in Mbit/s: the bytes read
// from omit to dur after its first byte (as iperf3's receiver counts its
// own time), or to its last byte if that came sooner; ok is false if that
// leaves no span.
func steadyReceived(ss []sample, omit, dur time.Duration) (mbps float64, ok bool) {
	if len(ss) < 2 {
		return 0, false
	}
	end := min(dur, ss[len(ss)-1].at)
	if end <= omit {
		return 0, false
	}
	return (bytesAt(ss, end) - bytesAt(ss, omit)) * 8 / (end - omit).Seconds() / 1e6, true
}

// receivedIntervals is the receiver's rate in each interval of every
// from its first byte to its last (the last interval may be shorter).
func receivedIntervals(ss []sample, every time.Duration) []Interval {
	if len(ss) < 2 || every <= 0 {
		return nil
	}
	var out []Interval
	last := ss[len(ss)-1].at
	for from := time.Duration(0); from < last; from += every {
		to := min(from+every, last)
		out = append(out, Interval{T: to.Seconds(), Mbps: (bytesAt(ss, to) - bytesAt(ss, from)) * 8 / (to - from).Seconds() / 1e6})
	}
	return out
}
