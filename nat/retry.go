package nat

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// Refused connects. A NAT or stateful firewall that answers a SYN matching
// no mapping with a TCP reset (Linux conntrack with nothing listening, or
// a rule "reject with tcp reset"; ICMP administratively prohibited from
// others) refuses the first SYN of a splice whenever it arrives before the
// other end's own SYN has opened its mapping: the two SYNs did not cross
// in flight (on short paths, a skew of more than the one-way delay). The
// reset also ends the mapping this end's SYN opened. Both ends therefore
// connect again, from the same port to the same endpoint, as soon as a
// connect is refused (SmartSockets §3.3.3: "both machines repeatedly
// attempt to create a direct connection"): each new SYN reopens this
// end's mapping, which then stays open for a round trip of the direct
// path (until the reset comes back), so the other end's next SYN finds it
// open and passes. Retries are paced (at least retryGap apart, plus up to
// retryJitter at random, so that the two ends do not stay in step and a
// refusal that comes back at once does not spin) and bounded by the
// attempt's deadline, never longer.
const (
	retryGap    = 250 * time.Microsecond
	retryJitter = 250 * time.Microsecond
)

// refusedByNetwork reports whether a connect failed because something on
// the path refused the SYN (a reset, or an ICMP unreachable that Linux
// makes fatal, as administratively prohibited): a splice retries those.
// Anything else (no route, a time-out, a local error) is final.
func refusedByNetwork(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH)
}

// RefusedError is the last refusal of a connect that was refused on every
// try until its deadline.
type RefusedError struct {
	Remote netip.AddrPort
	Tries  int
	Err    error // the last connect's error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%v (refused %d times in a row)", e.Err, e.Tries)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// connectRetrying connects from local to remote, again each time the
// network refuses, until ctx ends.
func connectRetrying(ctx context.Context, local, remote netip.AddrPort) (net.Conn, error) {
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(local), Control: reuseControl}
	var refused error // the last refusal
	for tries := 0; ; {
		start := time.Now()
		c, err := d.DialContext(ctx, "tcp", remote.String())
		if err == nil {
			return c, nil
		}
		if !refusedByNetwork(err) {
			// the dial's own deadline (ctx's) may fire before ctx says so.
			var ne net.Error
			ended := ctx.Err() != nil || errors.As(err, &ne) && ne.Timeout()
			if refused != nil && ended {
				// the deadline ended a try after refusals: they are the news.
				return nil, &RefusedError{Remote: remote, Tries: tries, Err: refused}
			}
			return nil, err
		}
		tries++
		refused = err
		if ctx.Err() != nil {
			return nil, &RefusedError{Remote: remote, Tries: tries, Err: err}
		}
		wait := retryGap - time.Since(start) + rand.N(retryJitter)
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, &RefusedError{Remote: remote, Tries: tries, Err: err}
			}
		}
	}
}
