package vconn

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/nat"
	"github.com/gridlink/gridlink/wire"
)

// nameTTL is how long a looked-up machine identifier is reused.
const nameTTL = time.Minute

// services maps well-known service names to ports.
var services = map[string]uint16{"echo": 7}

// Dial connects to a virtual address NODE:PORT (see identity.Addr).
func (n *Node) Dial(ctx context.Context, addr string) (*Conn, error) {
	a, err := identity.ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	port, err := portOf(a)
	if err != nil {
		return nil, fmt.Errorf("vconn: dial %s: %w", addr, err)
	}
	target, cached, err := n.resolve(ctx, a)
	if err != nil {
		return nil, fmt.Errorf("vconn: dial %s: %w", addr, err)
	}
	// A cached name may have moved on (its node restarted with a fresh
	// key, or elsewhere): when the cached method fails, or else the whole
	// setup, look the name up again and, if it names another machine now,
	// try that one, once.
	rechecked := false
	recheck := func(ctx context.Context, why error) (identity.Machine, bool) {
		if !cached || rechecked || errors.Is(why, direct.ErrRefused) || ctx.Err() != nil {
			return identity.Machine{}, false
		}
		rechecked = true
		n.forgetName(a)
		fresh, err := n.lookup(ctx, a)
		if err != nil || sameMachine(fresh, target) {
			return identity.Machine{}, false
		}
		n.cfg.Logf("vconn: dial %s: %s failed (%v); the name now names %s: trying that", addr, target, why, fresh)
		return fresh, true
	}
	c, err := n.dialMachine(ctx, target, port, recheck)
	if err == nil {
		return c, nil
	}
	if fresh, ok := recheck(ctx, err); ok {
		c, err2 := n.DialMachine(ctx, fresh, port)
		if err2 == nil {
			return c, nil
		}
		err = fmt.Errorf("%w (and before, at %s: %v)", err2, target, err)
	}
	n.forgetName(a)
	return nil, fmt.Errorf("vconn: dial %s: %w", addr, err)
}

// sameMachine reports whether a and b are the same node at the same hub
// and addresses.
func sameMachine(a, b identity.Machine) bool {
	return a.ID == b.ID && a.Hub == b.Hub && slices.Equal(a.Addrs, b.Addrs)
}

// Resolve finds the machine a virtual address names, through the hubs.
func (n *Node) Resolve(ctx context.Context, a identity.Addr) (identity.Machine, error) {
	m, _, err := n.resolve(ctx, a)
	return m, err
}

// resolve is Resolve, and says whether the answer came from the name cache.
func (n *Node) resolve(ctx context.Context, a identity.Addr) (identity.Machine, bool, error) {
	if a.Node == n.cfg.Name || a.Node == n.ID().String() {
		return n.Machine(), false, nil
	}
	key := a.Node + "@" + a.Hub
	n.mu.Lock()
	e, ok := n.names[key]
	n.mu.Unlock()
	if ok && time.Since(e.at) < nameTTL {
		return e.m, true, nil
	}
	m, err := n.lookup(ctx, a)
	return m, false, err
}

// lookup asks the hubs which machine a names.
func (n *Node) lookup(ctx context.Context, a identity.Addr) (identity.Machine, error) {
	key := a.Node + "@" + a.Hub
	if n.session == nil {
		return identity.Machine{}, fmt.Errorf("cannot resolve %q: this node has no hub", a.Node)
	}
	ms, err := n.session.Lookup(ctx, a.Node)
	if err != nil {
		return identity.Machine{}, fmt.Errorf("look up %q: %w", a.Node, err)
	}
	var match []identity.Machine
	for _, m := range ms {
		if a.Hub == "" || a.Hub == m.HubName || a.Hub == m.Hub.String() {
			match = append(match, m)
		}
	}
	switch len(match) {
	case 0:
		return identity.Machine{}, fmt.Errorf("no node %q is attached to any hub: %w", a, hub.ErrNotFound)
	case 1:
	default:
		var names []string
		for _, m := range match {
			names = append(names, m.ID.Short()+"@"+m.HubName)
		}
		return identity.Machine{}, fmt.Errorf("%q names %d nodes (%s): add @HUB or use an ID", a.Node, len(match), strings.Join(names, ", "))
	}
	n.mu.Lock()
	n.names[key] = nameEntry{match[0], time.Now()}
	n.mu.Unlock()
	return match[0], nil
}

func (n *Node) forgetName(a identity.Addr) {
	n.mu.Lock()
	delete(n.names, a.Node+"@"+a.Hub)
	n.mu.Unlock()
}

// result of one setup attempt.
type result struct {
	method  Method
	conn    net.Conn
	err     error
	elapsed time.Duration
	target  identity.Machine
	spare   bool // a direct connection that was a spare
}

// DialMachine connects to port on the target machine: the cached method
// for its site first, else a race of every method that could work.
func (n *Node) DialMachine(ctx context.Context, target identity.Machine, port uint16) (*Conn, error) {
	return n.dialMachine(ctx, target, port, nil)
}

// dialMachine is DialMachine; when the cached method fails, recheck (if
// given) may name another machine to race for instead: the name dialled
// now names it.
func (n *Node) dialMachine(ctx context.Context, target identity.Machine, port uint16, recheck func(context.Context, error) (identity.Machine, bool)) (*Conn, error) {
	start := time.Now()
	n.mu.Lock()
	cached, ok := n.cache[target.Hub]
	n.mu.Unlock()
	if ok && !n.cfg.NoCache && n.possible(cached, target) == nil {
		r := n.attempt(ctx, cached, target, port, spliceAttempts)
		if r.err == nil {
			return n.commit(r, target, port, start)
		}
		if errors.Is(r.err, direct.ErrRefused) {
			return nil, r.err
		}
		n.cfg.Logf("vconn: cached method %s to %s failed (%v): racing all methods", cached, target, r.err)
		n.mu.Lock()
		delete(n.cache, target.Hub)
		n.mu.Unlock()
		if recheck != nil {
			if fresh, ok := recheck(ctx, r.err); ok {
				target = fresh
			}
		}
	}
	r, err := n.race(ctx, target, port)
	if err != nil {
		return nil, err
	}
	if !n.cfg.NoCache && !target.Hub.IsZero() {
		n.mu.Lock()
		n.cache[target.Hub] = r.method
		n.mu.Unlock()
	}
	return n.commit(r, target, port, start)
}

func (n *Node) commit(r result, target identity.Machine, port uint16, start time.Time) (*Conn, error) {
	if _, err := r.conn.Write([]byte{commitByte}); err != nil {
		r.conn.Close()
		return nil, fmt.Errorf("%s connection to %s broke at once: %w", r.method, target, err)
	}
	return n.track(&Conn{Conn: r.conn, method: r.method, local: Addr{Node: n.Machine()}, remote: Addr{Node: target, Port: port}, setup: time.Since(start), spare: r.spare}), nil
}

// enabled reports whether method m is switched on.
func (n *Node) enabled(m Method) bool {
	for _, e := range n.cfg.Methods {
		if e == m {
			return true
		}
	}
	return false
}

// possible says why a method cannot work toward target (a *MethodError),
// or nil.
func (n *Node) possible(m Method, target identity.Machine) error {
	no := func(end End, cause error, format string, args ...any) error {
		return methodErr(m, end, cause, fmt.Errorf(format, args...))
	}
	switch {
	case !n.enabled(m):
		return no(Local, ErrDisabled, "%s is disabled", m)
	case m == Direct && len(target.Addrs) == 0:
		return no(Remote, ErrNoAddress, "the target lists no addresses")
	case (m == Reverse || m == Routed || m == Splice) && n.session == nil:
		return no(Local, ErrNoHub, "this node has no hub")
	case m == Reverse || m == Routed || m == Splice:
		if err := n.session.NotAttached(); err != nil {
			return methodErr(m, Local, ErrNoHub, err) // a *NotAttachedError: errors.As finds it
		}
	}
	switch {
	case (m == Reverse || m == Routed || m == Splice) && target.Hub.IsZero():
		return no(Remote, ErrNoHub, "the target is not attached to a hub")
	case m == Reverse && len(n.localMachine().Addrs) == 0:
		return no(Local, ErrNoAddress, "this node has no address to be called back at")
	case m == Splice:
		n.mu.Lock()
		failed, st := n.noSplice[target.Hub], n.nat
		n.mu.Unlock()
		if !failed.IsZero() && time.Since(failed) < spliceFailedFor {
			return no(Path, ErrSpliceRecent, "splicing to site %s failed %v ago", target.HubName, time.Since(failed).Round(time.Second))
		}
		if !st.at.IsZero() && st.err == nil && !st.class.Predictable() {
			cause := ErrNATUnknown
			if st.class.Allocation == nat.Random {
				cause = ErrRandomNAT
			}
			return no(Local, cause, "this host's NAT is %s: its ports cannot be predicted", st.class)
		}
	}
	return nil
}

// startDelay is a method's head start handicap in a race: direct at once,
// and splicing too (its rendezvous through the hubs takes longer than a
// direct setup, which still wins if it works); reverse one HeadStart
// later, routed two. A head start ends early once every more direct
// method is settled (see settled).
func (n *Node) startDelay(m Method) time.Duration {
	switch m {
	case Direct, Splice:
		return 0
	case Reverse:
		return n.cfg.HeadStart
	}
	return 2 * n.cfg.HeadStart
}

// race runs the possible methods with head starts and picks the most
// direct success: a less direct method that succeeds first waits a bounded
// time (graceFor) for more direct attempts still running.
func (n *Node) race(ctx context.Context, target identity.Machine, port uint16) (result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var methods []Method
	errs := map[Method]error{}
	for _, m := range []Method{Direct, Reverse, Splice, Routed} {
		if err := n.possible(m, target); err != nil {
			errs[m] = err
			continue
		}
		methods = append(methods, m)
	}
	if len(methods) == 0 {
		return result{}, raceError(target, errs)
	}
	results := make(chan result, len(methods))
	raceStart := time.Now()
	startOf := map[Method]time.Time{}
	kick := map[Method]chan struct{}{} // closed: start now, the head start is over
	var best *result
	for _, m := range methods {
		delay := n.startDelay(m)
		if delay > 0 && n.settled(m, methods, errs, target) {
			delay = 0
		}
		startOf[m] = raceStart.Add(delay)
		k := make(chan struct{})
		if delay == 0 {
			close(k)
		} else {
			kick[m] = k
		}
		go func() {
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-k:
			case <-ctx.Done():
				results <- result{method: m, err: ctx.Err()}
				return
			}
			results <- n.attempt(ctx, m, target, port, 1) // in a race, one splice attempt: routed stands by
		}()
	}
	// endHeadStarts starts at once the methods whose more direct rivals
	// are all settled.
	endHeadStarts := func() {
		for m, k := range kick {
			if (best == nil || m.rank() < best.method.rank()) && n.settled(m, methods, errs, target) {
				if now := time.Now(); now.Before(startOf[m]) {
					startOf[m] = now
				}
				close(k)
				delete(kick, m)
			}
		}
	}
	pending := len(methods)
	var grace <-chan time.Time
	defer func() {
		// close what arrives after the decision.
		go func(left int) {
			for ; left > 0; left-- {
				if r := <-results; r.conn != nil && (best == nil || r.conn != best.conn) {
					r.conn.Close()
				}
			}
		}(pending)
	}()
	for pending > 0 {
		select {
		case r := <-results:
			pending--
			if r.err != nil {
				errs[r.method] = r.err
				if errors.Is(r.err, direct.ErrRefused) {
					cancel()
					if best != nil {
						best.conn.Close()
						best = nil
					}
					return result{}, r.err
				}
				if best != nil && n.graceFor(best, methods, errs, startOf) <= 0 {
					return *best, nil
				}
				endHeadStarts()
				continue
			}
			if best != nil && best.method.rank() <= r.method.rank() {
				r.conn.Close()
				continue
			}
			if best != nil {
				best.conn.Close()
			}
			rr := r
			best = &rr
			wait := n.graceFor(best, methods, errs, startOf)
			if wait <= 0 {
				return *best, nil
			}
			grace = time.After(wait)
		case <-grace:
			return *best, nil
		case <-ctx.Done():
			if best != nil {
				best.conn.Close()
				best = nil
			}
			return result{}, ctx.Err()
		}
	}
	if best != nil {
		return *best, nil
	}
	return result{}, raceError(target, errs)
}

// settled reports whether every method of the race more direct than m is
// settled: it has failed, or it could not plausibly work (see plausible).
// m's head start, which keeps it from competing with methods that may
// still work, is then pointless: waiting it out only delays the setup.
func (n *Node) settled(m Method, methods []Method, errs map[Method]error, target identity.Machine) bool {
	for _, o := range methods {
		if o.rank() < m.rank() && errs[o] == nil && n.plausible(o, target) {
			return false
		}
	}
	return true
}

// graceFor is how much longer to wait for methods more direct than best
// that are still running, and only those that could plausibly work: each
// gets until it would have finished had it worked. best's setup time gives
// the path's round trip (a routed setup takes one, a reverse one about two
// and a half, a splice three and a half); direct and reverse need two and
// a half, splice three and a half, from their own starts, plus a margin.
// Zero or less: take best now.
func (n *Node) graceFor(best *result, methods []Method, errs map[Method]error, startOf map[Method]time.Time) time.Duration {
	rtt := best.elapsed
	switch best.method {
	case Reverse: // two and a half round trips
		rtt = best.elapsed * 2 / 5
	case Splice: // three and a half: rendezvous, go, connect, handshake
		rtt = best.elapsed * 2 / 7
	}
	var until time.Time
	for _, o := range methods {
		if o.rank() < best.method.rank() && errs[o] == nil && n.plausible(o, best.target) {
			need := rtt * 5 / 2 // direct: connect, handshake; reverse: request, connect, handshake
			switch {
			case o == Splice: // rendezvous (one and a half), connect, handshake
				need = rtt * 7 / 2
			case best.method == Splice:
				// direct and reverse cost less than the splice that won:
				// had they worked, they would have finished within as
				// long from their own start, however loaded the machine.
				need = max(need, best.elapsed)
			}
			if t := startOf[o].Add(need + graceMargin); t.After(until) {
				until = t
			}
		}
	}
	return time.Until(until)
}

// graceMargin covers processing time on the way (handshakes, hubs).
const graceMargin = 10 * time.Millisecond

// plausible reports whether a method could well work toward target, judged
// by addresses as the SmartSockets heuristic does (a private address on a
// network we are not on is a long shot) and by the ends' routes (an end
// without a default route reaches only its own networks): not worth
// waiting for once another method has connected, nor worth holding back a
// less direct method for.
func (n *Node) plausible(m Method, target identity.Machine) bool {
	local, _ := direct.LocalPrefixes()
	reachable := func(addrs []netip.AddrPort) bool {
		for _, a := range addrs {
			ip := a.Addr().Unmap()
			if (!ip.IsPrivate() && ip.IsGlobalUnicast()) || ip.IsLoopback() {
				return true // public, or the same host
			}
			for _, p := range append(local, n.cfg.Preferred...) {
				if p.Contains(ip) {
					return true
				}
			}
		}
		return false
	}
	// near: the target is this host or on one of our networks, where the
	// two reach each other whatever their routes.
	near := func(addrs []netip.AddrPort) bool {
		for _, a := range addrs {
			ip := a.Addr().Unmap()
			if ip.IsLoopback() || slices.ContainsFunc(append(local, n.cfg.Preferred...), func(p netip.Prefix) bool { return p.Contains(ip) }) {
				return true
			}
		}
		return false
	}
	n.mu.Lock()
	nonRouted := n.nonRouted
	n.mu.Unlock()
	// an end without a default route (by its own routing table, which a
	// target publishes: Machine.NonRouted) reaches only its own networks.
	switch {
	case m == Direct && nonRouted,
		m == Reverse && target.NonRouted,
		m == Splice && (nonRouted || target.NonRouted): // both ends' SYNs must cross
		return near(target.Addrs)
	}
	switch m {
	case Direct:
		return reachable(target.Addrs)
	case Reverse:
		// the target must reach us: we have a public address, or it is on
		// one of our networks.
		for _, a := range n.localMachine().Addrs {
			if ip := a.Addr().Unmap(); (!ip.IsPrivate() && ip.IsGlobalUnicast()) || ip.IsLoopback() {
				return true
			}
		}
		return reachable(onlyPrivate(target.Addrs))
	}
	return true
}

// ErrNoMethod is wrapped by the error of a dial that no method won.
var ErrNoMethod = errors.New("no method reached the target")

// RaceError is a race that no method won: every method's error, each a
// *MethodError (errors.As on Errs' values). It unwraps to ErrNoMethod and,
// when the node has no hub, to the *NotAttachedError (which its text then
// names first), never to one method's cause, which is not the dial's.
type RaceError struct {
	Target identity.Machine
	Errs   map[Method]error
}

// notAttached is the *NotAttachedError one of e's methods met, or nil.
func (e *RaceError) notAttached() *NotAttachedError {
	var na *NotAttachedError
	for _, err := range e.Errs {
		if errors.As(err, &na) {
			return na
		}
	}
	return nil
}

func (e *RaceError) Error() string {
	na := e.notAttached()
	var parts []string
	for m, err := range e.Errs {
		if na != nil && errors.As(err, new(*NotAttachedError)) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: %v", m, err))
	}
	sort.Strings(parts)
	if na != nil {
		if len(parts) == 0 {
			return fmt.Sprintf("cannot reach %s: %v", e.Target, na)
		}
		return fmt.Sprintf("cannot reach %s: %v; %s", e.Target, na, strings.Join(parts, "; "))
	}
	return fmt.Sprintf("no method reached %s: %s", e.Target, strings.Join(parts, "; "))
}

func (e *RaceError) Unwrap() []error {
	if na := e.notAttached(); na != nil {
		return []error{ErrNoMethod, na}
	}
	return []error{ErrNoMethod}
}

func raceError(target identity.Machine, errs map[Method]error) error {
	return &RaceError{Target: target, Errs: errs}
}

// attempt tries one method; a splice gets up to tries attempts.
func (n *Node) attempt(ctx context.Context, m Method, target identity.Machine, port uint16, tries int) result {
	start := time.Now()
	var c net.Conn
	var err error
	spared := false
	switch m {
	case Direct:
		c, spared, err = n.directSetup(ctx, target, port)
	case Reverse:
		c, err = n.reverse(ctx, target, port)
	case Splice:
		c, err = n.splice(ctx, target, port, tries)
	case Routed:
		c, err = n.routed(ctx, target, port)
	default:
		err = fmt.Errorf("method %s is not available", m)
	}
	return result{method: m, conn: c, err: n.classify(m, err), elapsed: time.Since(start), target: target, spare: spared && err == nil}
}

type pendingReverse struct {
	target identity.ID
	conn   chan *direct.Conn
	fail   chan *wire.Fail
}

func (n *Node) reverse(ctx context.Context, target identity.Machine, port uint16) (net.Conn, error) {
	var tb [8]byte
	_, _ = rand.Read(tb[:])
	token := binary.BigEndian.Uint64(tb[:])
	p := &pendingReverse{target: target.ID, conn: make(chan *direct.Conn, 1), fail: make(chan *wire.Fail, 1)}
	n.mu.Lock()
	n.reverses[token] = p
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.reverses, token)
		n.mu.Unlock()
	}()
	req := &wire.Message{Kind: wire.KReverse, Reverse: &wire.Reverse{Token: token, From: n.Machine(), Port: port, Target: target.ID}}
	if err := n.session.Send(ctx, target.Hub, target.ID, req); err != nil {
		return nil, fmt.Errorf("ask %s to call back: %w", target, err)
	}
	select {
	case c := <-p.conn:
		return c, nil
	case f := <-p.fail:
		return nil, &failError{code: f.Code, reason: f.Reason}
	case <-ctx.Done():
		return nil, fmt.Errorf("%s did not call back: %w", target, ctx.Err())
	}
}

func (n *Node) routed(ctx context.Context, target identity.Machine, port uint16) (net.Conn, error) {
	circuit, err := n.session.Open(ctx, target, port)
	if err != nil {
		return nil, err
	}
	tc, err := n.creds.Client(ctx, circuit, target.ID, nil)
	if err != nil {
		circuit.Close()
		return nil, err
	}
	return tc, nil
}

func onlyPrivate(addrs []netip.AddrPort) []netip.AddrPort {
	var out []netip.AddrPort
	for _, a := range addrs {
		if a.Addr().Unmap().IsPrivate() {
			out = append(out, a)
		}
	}
	return out
}
