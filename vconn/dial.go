package vconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/gridlink/gridlink/direct"
	"github.com/gridlink/gridlink/identity"
)

// services maps well-known service names to ports: every agent's echo,
// and the exec service (package exec's Port, rexec's 512 in
// /etc/services), which proxy restrictions name "exec".
var services = map[string]uint16{"echo": 7, "exec": 512}

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
	c, err := n.dialMachine(ctx, target, port, recheck, nil)
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
	return n.dialMachine(ctx, target, port, nil, nil)
}

// DialMachineVia is DialMachine by the methods via only (none: every
// method): the cached method for the target's site first if it is one of
// them, else a race of those of them that could work. When none of them
// could (each disabled, or impossible toward the target), it tries none
// and fails with a *RaceError saying why of each, which unwraps to
// ErrNoneApplies. A virtual network's shortcut is a dial via direct,
// reverse and splice.
func (n *Node) DialMachineVia(ctx context.Context, target identity.Machine, port uint16, via ...Method) (*Conn, error) {
	return n.dialMachine(ctx, target, port, nil, via)
}

// dialMachine is DialMachine by the methods via (nil: all); when the
// cached method fails, recheck (if given) may name another machine to
// race for instead: the name dialled now names it.
func (n *Node) dialMachine(ctx context.Context, target identity.Machine, port uint16, recheck func(context.Context, error) (identity.Machine, bool), via []Method) (*Conn, error) {
	start := time.Now()
	target = n.unhidden(target)
	n.memo.mu.Lock()
	cached, ok := n.memo.methods[target.Hub]
	n.memo.mu.Unlock()
	if ok && !n.cfg.NoCache && allowed(via, cached) && n.possible(cached, target) == nil {
		r := n.attempt(ctx, cached, target, port, spliceAttempts)
		if r.err == nil {
			return n.commit(r, target, port, start)
		}
		if errors.Is(r.err, direct.ErrRefused) {
			return nil, r.err
		}
		n.cfg.Logf("vconn: cached method %s to %s failed (%v): racing all methods", cached, target, r.err)
		n.memo.mu.Lock()
		delete(n.memo.methods, target.Hub)
		n.memo.mu.Unlock()
		if recheck != nil {
			if fresh, ok := recheck(ctx, r.err); ok {
				target = n.unhidden(fresh)
			}
		}
	}
	r, err := n.race(ctx, target, port, via)
	if err != nil {
		return nil, err
	}
	if !n.cfg.NoCache && !target.Hub.IsZero() {
		n.memo.mu.Lock()
		n.memo.methods[target.Hub] = r.method
		n.memo.mu.Unlock()
	}
	return n.commit(r, target, port, start)
}

// allowed reports whether m is among via (nil: every method is).
func allowed(via []Method, m Method) bool {
	return via == nil || slices.Contains(via, m)
}

func (n *Node) commit(r result, target identity.Machine, port uint16, start time.Time) (*Conn, error) {
	if _, err := r.conn.Write([]byte{commitByte}); err != nil {
		r.conn.Close()
		return nil, fmt.Errorf("%s connection to %s broke at once: %w", r.method, target, err)
	}
	setup := time.Since(start)
	if !n.cfg.NoCounters {
		n.counts.dialled(r.method, setup)
	}
	if r.method == Reverse || r.method == Splice {
		// pre-arranged connections for the next setups by this slow
		// method, each then one round trip (spare.go).
		n.refillSpare(target, r.method)
	}
	return n.track(&Conn{Conn: r.conn, method: r.method, local: Addr{Node: n.Machine()}, remote: Addr{Node: target, Port: port}, setup: setup, spare: r.spare}), nil
}
