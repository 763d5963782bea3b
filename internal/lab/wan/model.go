package wan

import (
	"math"
	"math/rand/v2"
	"time"
)

// Verdict is what a pipe does with one packet.
type Verdict uint8

const (
	Deliver   Verdict = iota // release the packet at the returned time
	DropLoss                 // dropped by the random loss stage
	DropQueue                // tail-dropped: the queue was full
)

func (v Verdict) String() string {
	switch v {
	case Deliver:
		return "deliver"
	case DropLoss:
		return "drop(loss)"
	case DropQueue:
		return "drop(queue)"
	}
	return "verdict(?)"
}

// Model is the arithmetic of one direction of a link, dummynet style, free
// of I/O and of any clock: the caller passes arrival times (nanoseconds on
// any monotonic clock, never decreasing between calls) and gets back release
// times on the same clock.
//
// A packet of n bytes arriving at t is first dropped with probability Loss.
// Otherwise it starts serialization when the link is free,
// departure = max(t, busyUntil) + n·8/Rate, and is tail-dropped if it would
// wait longer than the queue takes to drain (departure−t beyond Queue bytes
// at Rate, i.e. the bytes ahead of it plus its own exceed the queue limit).
// An accepted packet makes the link busy until its departure and is
// released Delay later. Release times therefore never decrease, so a FIFO
// is all an implementation needs to hold packets in flight.
//
// A Model is not safe for concurrent use.
type Model struct {
	delay     int64   // ns
	rate      int64   // bit/s, 0 = unlimited
	loss      float64 // 0..1
	limit     int64   // bytes
	drain     int64   // ns to serialize limit bytes
	busyUntil int64   // ns, departure of the last accepted packet
	rng       *rand.Rand
}

// NewModel returns the model of one direction of l. seed selects the loss
// sequence; equal seeds give equal sequences.
func NewModel(l Link, seed uint64) *Model {
	m := &Model{
		delay: int64(l.Delay),
		rate:  l.Rate,
		loss:  l.Loss,
		limit: l.QueueLimit(),
		rng:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
	if m.rate > 0 {
		m.drain = m.txTime(m.limit)
	}
	return m
}

// Delay is the model's one-way propagation delay.
func (m *Model) Delay() time.Duration { return time.Duration(m.delay) }

// Offer runs a packet of n bytes arriving at t through the model.
func (m *Model) Offer(t int64, n int) (release int64, v Verdict) {
	if m.loss > 0 && m.rng.Float64() < m.loss {
		return 0, DropLoss
	}
	if m.rate <= 0 {
		return t + m.delay, Deliver
	}
	dep := max(t, m.busyUntil) + m.txTime(int64(n))
	if dep-t > m.drain {
		return 0, DropQueue
	}
	m.busyUntil = dep
	return dep + m.delay, Deliver
}

// Backlog is how many bytes are waiting for serialization at time t.
func (m *Model) Backlog(t int64) int64 {
	if m.rate <= 0 || m.busyUntil <= t {
		return 0
	}
	return int64(float64(m.busyUntil-t) * float64(m.rate) / 8e9)
}

// txTime is the time to serialize n bytes at the model's rate, rounded up to
// a whole nanosecond.
func (m *Model) txTime(n int64) int64 {
	bits := n * 8
	if bits <= math.MaxInt64/1_000_000_000 {
		return (bits*1e9 + m.rate - 1) / m.rate
	}
	return int64(float64(bits) * 1e9 / float64(m.rate))
}
