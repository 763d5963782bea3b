package direct

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/pki"
)

// Dialer makes direct connections. Only Creds is required; the zero values
// of the other fields work.
type Dialer struct {
	Creds     *pki.Credentials
	Preferred []netip.Prefix // networks to try first (user configuration)
	Stagger   time.Duration  // head start of each attempt over the next; default 30ms
	Timeout   time.Duration  // per attempt (connect and handshake); default 5s (ssh tunnels: SSHConfig.Timeout)
	SSH       *SSHConfig     // nil: no ssh tunnels
	// Admit judges the listener once its certificate chain is checked (the
	// credentials' pki.Trust) and may refuse it; nil: any listener the
	// credentials admit. Its error's text reaches the listener in the
	// handshake's verdict.
	Admit func(peer pki.Peer, request string) error
	// Local returns this host's interface prefixes for Order; default:
	// LocalPrefixes at each Dial.
	Local func() []netip.Prefix
	// DialContext makes the TCP connections (to targets and to sshds);
	// default: a net.Dialer's, in the namespace of whichever thread runs it.
	DialContext func(ctx context.Context, network, address string) (net.Conn, error)

	mu  sync.Mutex
	won map[identity.ID]string // per target: the candidate (via) that won last
}

const (
	defaultStagger = 30 * time.Millisecond
	defaultTimeout = 5 * time.Second
)

func (d *Dialer) stagger() time.Duration {
	if d.Stagger > 0 {
		return d.Stagger
	}
	return defaultStagger
}

func (d *Dialer) timeout() time.Duration {
	if d.Timeout > 0 {
		return d.Timeout
	}
	return defaultTimeout
}

func (d *Dialer) dialTCP(ctx context.Context, address string) (net.Conn, error) {
	if d.DialContext != nil {
		return d.DialContext(ctx, "tcp", address)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", address)
}

// candidate is one way to reach the target: an address, or an ssh tunnel.
type candidate struct {
	via  string
	addr netip.AddrPort
	ssh  *transportSpec // nil: plain TCP to addr
}

// candidates returns the target's addresses in heuristic order, then, with
// ssh configured, a tunnel through an sshd on port 22 of each address to
// the port on 127.0.0.1 as seen from there (SmartSockets §3.2.4).
func (d *Dialer) candidates(target identity.Machine) []candidate {
	local := d.Local
	if local == nil {
		local = localOrNil
	}
	all := append(append([]netip.AddrPort(nil), target.Addrs...), target.Observed...)
	ordered := Order(local(), d.Preferred, all)
	cs := make([]candidate, 0, 2*len(ordered))
	for _, ap := range ordered {
		cs = append(cs, candidate{via: ap.String(), addr: ap})
	}
	if d.SSH != nil {
		for _, ap := range ordered {
			s := &transportSpec{host: ap.Addr().String(), port: "22", target: "127.0.0.1:" + strconv.Itoa(int(ap.Port()))}
			cs = append(cs, candidate{via: s.String(), ssh: s})
		}
	}
	// what won last time goes first: a multi-homed target's first address
	// by the heuristic may name another machine here, and finding that out
	// costs a handshake.
	d.mu.Lock()
	last := d.won[target.ID]
	d.mu.Unlock()
	if i := slices.IndexFunc(cs, func(c candidate) bool { return c.via == last }); i > 0 {
		first := cs[i]
		copy(cs[1:i+1], cs[:i])
		cs[0] = first
	}
	return cs
}

// Forget drops what the dialer remembers about which address won.
func (d *Dialer) Forget() {
	d.mu.Lock()
	d.won = nil
	d.mu.Unlock()
}

// remember notes which candidate reached target (via "" forgets).
func (d *Dialer) remember(target identity.ID, via string) {
	if target.IsZero() {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if via == "" {
		delete(d.won, target)
		return
	}
	if d.won == nil {
		d.won = make(map[identity.ID]string)
	}
	d.won[target] = via
}

type outcome struct {
	i    int
	conn *Conn
	err  error
	end  time.Duration
}

// Dial connects to target: it races the target's candidate addresses
// (Addrs and Observed, in Order; the one that won the last Dial to the
// same ID first), starting attempt k+1 a Stagger after
// attempt k or as soon as an attempt fails, whichever is first. Each
// attempt is a TCP connect plus a TLS handshake that checks the peer is
// target.ID (any peer if it is zero) and offers request (see the package
// doc). The first success wins; the others are cancelled and closed. A
// wrong machine (pki.ErrWrongPeer) is a failed attempt. A refusal ends the
// dial at once with an error wrapping ErrRefused: the target itself said
// no. Otherwise, if all fail, the *DialError lists every address tried and
// why. With SSH set, each address is also tried through an sshd on its
// port 22 (after all the plain attempts have started), as a tunnel to the
// same port on the sshd's 127.0.0.1. On success Conn.Via names the winner
// and Conn.Attempts holds the whole race; Dial returns once the losers have
// stopped (cancelling an attempt is immediate).
func (d *Dialer) Dial(ctx context.Context, target identity.Machine, request string) (*Conn, error) {
	if d.Creds == nil {
		return nil, errors.New("direct: dial: Dialer has no credentials")
	}
	if err := checkRequest(request); err != nil {
		return nil, fmt.Errorf("direct: dial %v: %w", target, err)
	}
	cands := d.candidates(target)
	derr := &DialError{Target: target}
	if len(cands) == 0 {
		return nil, derr
	}
	begin := time.Now()
	race, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan outcome, len(cands))
	attempts := make([]Attempt, 0, len(cands))
	launch := func() {
		i := len(attempts)
		attempts = append(attempts, Attempt{Via: cands[i].via, Start: time.Since(begin)})
		go func() {
			c, err := d.attempt(race, cands[i], target.ID, request)
			results <- outcome{i, c, err, time.Since(begin)}
		}()
	}
	timer := time.NewTimer(d.stagger())
	defer timer.Stop()
	launch()
	inflight := 1
	var winner *Conn
	var refused bool
	for inflight > 0 {
		var tick <-chan time.Time
		if len(attempts) < len(cands) && winner == nil && !refused && ctx.Err() == nil {
			tick = timer.C
		}
		select {
		case <-tick:
			launch()
			inflight++
			timer.Reset(d.stagger())
		case r := <-results:
			inflight--
			a := &attempts[r.i]
			a.Elapsed = r.end - a.Start
			switch {
			case r.err == nil && winner == nil && !refused:
				winner = r.conn
				winner.Via = a.Via
				cancel() // the others lose
			case r.err == nil:
				r.conn.Close()
				a.Err = errLost
			case winner != nil && race.Err() != nil && ctx.Err() == nil:
				a.Err = errLost
			case refused && race.Err() != nil && ctx.Err() == nil:
				a.Err = errAfterRefusal
			default:
				a.Err = r.err
				if errors.Is(r.err, ErrRefused) {
					refused = true
					cancel() // the target said no: its other addresses would too
				}
			}
			if winner == nil && !refused && ctx.Err() == nil && len(attempts) < len(cands) {
				launch() // a failure starts the next attempt at once
				inflight++
				timer.Reset(d.stagger())
			}
		}
	}
	if winner != nil {
		winner.Attempts = attempts
		d.remember(target.ID, winner.Via)
		return winner, nil
	}
	if !refused {
		d.remember(target.ID, "")
	}
	derr.Attempts = attempts
	for _, c := range cands[len(attempts):] {
		derr.NotTried = append(derr.NotTried, c.via)
	}
	derr.Err = ctx.Err()
	return nil, derr
}

// attempt makes one connection: TCP or an ssh tunnel, then the handshake.
func (d *Dialer) attempt(race context.Context, c candidate, want identity.ID, request string) (*Conn, error) {
	limit := d.timeout()
	if c.ssh != nil {
		limit = d.SSH.timeout()
	}
	ctx, cancel := context.WithTimeout(race, limit)
	defer cancel()
	var raw net.Conn
	var err error
	phase := "tcp connect"
	if c.ssh != nil {
		phase = "ssh tunnel"
		raw, err = d.sshTransport(ctx, *c.ssh)
	} else {
		raw, err = d.dialTCP(ctx, c.via)
	}
	if err == nil {
		phase = "tls handshake"
		var conn *Conn
		if conn, err = clientHandshake(ctx, d.Creds, raw, want, request, d.Admit); err == nil {
			return conn, nil
		}
		if errors.Is(err, pki.ErrWrongPeer) || errors.Is(err, ErrRefused) {
			return nil, err
		}
	}
	if race.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, &timeoutError{phase, limit}
	}
	if phase == "tcp connect" {
		err = bareError(err)
	}
	if c.ssh != nil || phase == "tls handshake" {
		return nil, err // already says what failed
	}
	return nil, fmt.Errorf("%s: %w", phase, err)
}

// Handshake runs the dialling side of a direct handshake over a
// connection made some other way (e.g. by Transport): it checks the peer
// is want (anyone if zero) and offers request, as Dial's attempts do. conn
// is closed on error.
func (d *Dialer) Handshake(ctx context.Context, conn net.Conn, want identity.ID, request string) (*Conn, error) {
	if d.Creds == nil {
		conn.Close()
		return nil, errors.New("direct: handshake: Dialer has no credentials")
	}
	if err := checkRequest(request); err != nil {
		conn.Close()
		return nil, fmt.Errorf("direct: handshake: %w", err)
	}
	c, err := clientHandshake(ctx, d.Creds, conn, want, request, d.Admit)
	if err != nil {
		return nil, fmt.Errorf("direct: handshake with %s: %w", conn.RemoteAddr(), err)
	}
	c.Via = conn.RemoteAddr().String()
	return c, nil
}

// timeoutError is an attempt that ran out of time.
type timeoutError struct {
	phase string
	after time.Duration
}

func (e *timeoutError) Error() string   { return fmt.Sprintf("%s: timed out after %v", e.phase, e.after) }
func (e *timeoutError) Unwrap() error   { return context.DeadlineExceeded }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }

// bareError drops the wrappers of a failed connect that repeat what the
// attempt already says ("dial tcp ADDR: connect: "), keeping the cause
// (e.g. syscall.ECONNREFUSED) for errors.Is.
func bareError(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		err = oe.Err
	}
	var se *os.SyscallError
	if errors.As(err, &se) && se.Err != nil {
		err = se.Err
	}
	return err
}
