package nat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// The two sides of one splice attempt, with the timing both follow (after
// libp2p's DCUtR): the offering side measures the round trip of the path
// the rendezvous messages take (minus the time the answering side held the
// offer), sends go, and connects half that round trip later, when the go
// reaches the other side, which connects on it. How the messages travel
// (routed through hubs, for nodes and for hubs alike) is the caller's.

// ErrPredict wraps a failure to predict this host's endpoint: no retry
// helps until the NAT is known and predictable.
var ErrPredict = errors.New("cannot predict this host's endpoint")

// ErrPunch wraps a simultaneous open that made no connection in time.
var ErrPunch = errors.New("no connection")

// Predictor predicts this host's external endpoints for a connection from
// local port: one, or several behind a sequential NAT (sequential).
type Predictor func(ctx context.Context, port uint16) (eps []netip.AddrPort, sequential bool, err error)

// PunchTimeout is how long a simultaneous open may take once it starts:
// the SYNs cross within the direct path's round trip, shorter than the
// rendezvous path's (rtt), and a SYN that missed is retransmitted only
// after a second, by which time a new attempt (or a relay) is better.
func PunchTimeout(rtt time.Duration) time.Duration {
	return max(rtt, 10*time.Millisecond) + 20*time.Millisecond
}

// prepare reserves a port and predicts this host's endpoints for it.
func prepare(ctx context.Context, predict Predictor) (*Reservation, []netip.AddrPort, bool, error) {
	res, err := ReservePort(netip.IPv4Unspecified())
	if err != nil {
		return nil, nil, false, err
	}
	eps, seq, err := predict(ctx, res.Addr.Port())
	if err != nil {
		res.Close()
		return nil, nil, false, fmt.Errorf("%w: %v", ErrPredict, err)
	}
	return res, eps, seq, nil
}

// Offer runs the offering side of one attempt: reserve a port, predict,
// offer (send the prediction), await the answer (the peer's endpoints and
// how long it held the offer), send go, wait half the round trip, punch.
// Errors from offer, await and sendGo are returned as they are.
func Offer(ctx context.Context, predict Predictor,
	offer func(eps []netip.AddrPort) error,
	await func(ctx context.Context) (peer []netip.AddrPort, held time.Duration, err error),
	sendGo func() error) (net.Conn, error) {
	return OfferTimed(ctx, predict, offer, func(ctx context.Context) (Reply, error) {
		peer, held, err := await(ctx)
		return Reply{Peer: peer, Held: held}, err
	}, sendGo)
}

// Reply is the answering side's reply to an offer: its endpoints, how
// long it held the offer, and whether it connects on its own (Early).
type Reply struct {
	Peer []netip.AddrPort
	Held time.Duration
	// Early: the answering side connects about half the round trip the
	// offer estimated after its reply (AnswerEarly: three quarters), when
	// the reply reaches the offering side, without waiting for go: the
	// offering side connects at once on the reply, and sends no go. Both SYNs leave half a round
	// trip sooner than with go, and the connection is up half a round
	// trip sooner. The SYNs still cross as long as the estimate is within
	// half and twice the path's round trip.
	Early bool
}

// OfferTimed is Offer whose await tells whether the answer is early
// (Reply.Early).
func OfferTimed(ctx context.Context, predict Predictor,
	offer func(eps []netip.AddrPort) error,
	await func(ctx context.Context) (Reply, error),
	sendGo func() error) (net.Conn, error) {
	res, eps, seq, err := prepare(ctx, predict)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	start := time.Now()
	if err := offer(eps); err != nil {
		return nil, err
	}
	r, err := await(ctx)
	if err != nil {
		return nil, err
	}
	peer := r.Peer
	rtt := max(time.Since(start)-r.Held, time.Millisecond)
	if r.Early {
		return punch(ctx, res, Aim(peer, seq), rtt)
	}
	if err := sendGo(); err != nil {
		return nil, err
	}
	select { // the go reaches the other side about half a round trip from now
	case <-time.After(rtt / 2):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return punch(ctx, res, Aim(peer, seq), rtt)
}

// punch connects from res to the aims, for PunchTimeout(rtt).
func punch(ctx context.Context, res *Reservation, aims []netip.AddrPort, rtt time.Duration) (net.Conn, error) {
	pctx, cancel := context.WithTimeout(ctx, PunchTimeout(rtt))
	defer cancel()
	c, err := Punch(pctx, res, aims)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPunch, err)
	}
	return c, nil
}

// AnswerEarly runs the answering side of an early attempt (Reply.Early),
// for an offer of peer's endpoints that arrived at got and estimated the
// round trip as rtt: reserve a port, predict, reply (reply must say the
// answer is early), and connect three quarters of rtt later: half for the
// reply to reach the offering side, which connects on it, and a quarter
// of margin, because the two ways of missing are not alike. A SYN of ours
// that reaches the other end before its own SYN left meets its NAT with
// no mapping, which may refuse it (a reset ends our attempt: seen in the
// lab when the reply took longer than estimated); one that leaves a little
// late still crosses the other's mapping, made by its SYN, and the two
// meet as a simultaneous open, no later for the offering side.
func AnswerEarly(ctx context.Context, got time.Time, peer []netip.AddrPort, predict Predictor,
	reply func(eps []netip.AddrPort, held time.Duration) error, rtt time.Duration) (net.Conn, error) {
	res, eps, seq, err := prepare(ctx, predict)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	if err := reply(eps, time.Since(got)); err != nil {
		return nil, err
	}
	select {
	case <-time.After(rtt * 3 / 4):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return punch(ctx, res, Aim(peer, seq), rtt)
}

// Answer runs the answering side of one attempt, for an offer of peer's
// endpoints that arrived at got: reserve a port, predict, reply (this
// side's endpoints and how long it held the offer), wait for the go,
// punch. Errors from reply and awaitGo are returned as they are.
func Answer(ctx context.Context, got time.Time, peer []netip.AddrPort, predict Predictor,
	reply func(eps []netip.AddrPort, held time.Duration) error,
	awaitGo func(ctx context.Context) error) (net.Conn, error) {
	res, eps, seq, err := prepare(ctx, predict)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	start := time.Now()
	if err := reply(eps, time.Since(got)); err != nil {
		return nil, err
	}
	if err := awaitGo(ctx); err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, PunchTimeout(time.Since(start)))
	defer cancel()
	c, err := Punch(pctx, res, Aim(peer, seq))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPunch, err)
	}
	return c, nil
}
