package vconn

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/gridlink/gridlink/nat"
)

// What this node knows about its own NAT (or stateful firewall, or lack of
// either), learnt from hubs that observe its connections from outside
// (nat.Observe) and classified by package nat. Splicing needs it to
// predict the endpoint its next connection will come from.
const (
	natProbes     = 4               // observations per probe
	natProbeEvery = 5 * time.Minute // how long a classification is trusted
	maxObservers  = 2
)

type natState struct {
	class     nat.Class
	observers []netip.AddrPort
	at        time.Time
	err       error
}

// NAT returns the last classification of this host's NAT and when it was
// made (zero time: never), or why it could not be made.
func (n *Node) NAT() (nat.Class, time.Time, error) {
	n.self.mu.Lock()
	defer n.self.mu.Unlock()
	return n.self.nat.class, n.self.nat.at, n.self.nat.err
}

// natClass returns a classification younger than natProbeEvery, probing
// first if there is none.
func (n *Node) natClass(ctx context.Context) (natState, error) {
	n.self.mu.Lock()
	st := n.self.nat
	n.self.mu.Unlock()
	if !st.at.IsZero() && time.Since(st.at) < natProbeEvery && st.err == nil {
		return st, nil
	}
	return n.probeNAT(ctx)
}

// probeNAT observes this host's connections from up to maxObservers hubs
// (public ones first: a hub inside our own NAT sees nothing of it) and
// classifies what they saw.
func (n *Node) probeNAT(ctx context.Context) (natState, error) {
	st, err := n.observe(ctx)
	st.at, st.err = time.Now(), err
	n.self.mu.Lock()
	n.self.nat = st
	n.self.mu.Unlock()
	return st, err
}

func (n *Node) observe(ctx context.Context) (natState, error) {
	if n.session == nil {
		return natState{}, errors.New("no hub to observe this host from")
	}
	hubs, err := n.session.Hubs(ctx)
	if err != nil {
		return natState{}, fmt.Errorf("list hubs to observe this host from: %w", err)
	}
	var byHub [][]netip.AddrPort
	for _, h := range hubs {
		byHub = append(byHub, h.Addrs)
	}
	observers := nat.Observers(byHub, maxObservers)
	c, err := nat.Probe(ctx, observers, natProbes)
	if err != nil {
		return natState{}, err
	}
	return natState{class: c, observers: observers}, nil
}

// sequentialGuesses is how many endpoints a node behind a sequential NAT
// predicts: its counter may move on between the observation and the
// splice (this node's own other connections, e.g. a racing direct
// attempt, or other hosts'), and the peer aims at each.
const sequentialGuesses = 3

// predictEndpoints says where, as seen from outside, the next connection
// from local port port will come from: one endpoint, or behind a
// sequential NAT (seq) the sequentialGuesses most likely ones.
func (n *Node) predictEndpoints(ctx context.Context, port uint16) (eps []netip.AddrPort, seq bool, err error) {
	st, err := n.natClass(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("this host's NAT is not known: %w", err)
	}
	eps, seq, err = nat.Endpoints(ctx, st.class, st.observers[0], port, sequentialGuesses)
	if err != nil {
		return nil, seq, err
	}
	return n.lie(eps), seq, nil
}

// lie lets tests model a hub that lies about observed addresses, or a NAT
// that changes its mapping during a splice: predictions go wrong.
func (n *Node) lie(eps []netip.AddrPort) []netip.AddrPort {
	if n.testPredict != nil {
		return n.testPredict(eps)
	}
	return eps
}

// publishNAT puts the external address of this host's NAT, if it is behind
// one, and whether it is sequential in its machine identifier
// (identity.Machine.NAT, NATSequential), and tells the hub when it
// changed: peers' diagnoses (Explain) say so then, and their races wait
// for a splice as long as it takes (graceFor).
func (n *Node) publishNAT(c nat.Class) {
	ext := netip.Addr{}
	if c.Allocation != nat.None && c.Allocation != nat.Unknown && c.External.IsValid() {
		ext = c.External
	}
	seq := ext.IsValid() && c.Allocation == nat.Sequential
	n.self.mu.Lock()
	changed := n.self.natExternal != ext || n.self.natSequential != seq
	n.self.natExternal, n.self.natSequential = ext, seq
	n.self.mu.Unlock()
	if changed {
		n.advertise()
	}
}

// publishRoute puts whether this host has a default route in its machine
// identifier (identity.Machine.NonRouted), and tells the hub when it
// changed: peers judge by it which methods can work (plausible).
func (n *Node) publishRoute() {
	non := !HasDefaultRoute()
	n.self.mu.Lock()
	changed := n.self.nonRouted != non
	n.self.nonRouted = non
	n.self.mu.Unlock()
	if changed {
		n.advertise()
	}
}

// watchNAT classifies this host's NAT soon after start, once the hubs have
// had a moment to learn of each other, and again every natProbeEvery.
func (n *Node) watchNAT() {
	defer n.wg.Done()
	delay := 2 * time.Second
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(delay):
		}
		n.publishRoute()
		ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
		st, err := n.probeNAT(ctx)
		cancel()
		var na *NotAttachedError
		switch {
		case errors.As(err, &na):
			delay = 2 * time.Second // soon after the node attaches
		case err != nil:
			n.cfg.Logf("vconn: node %s: cannot classify this host's NAT: %v", n.cfg.Name, err)
			delay = 30 * time.Second
		default:
			n.cfg.Logf("vconn: node %s: NAT %s (observed from %v)", n.cfg.Name, st.class, st.observers)
			delay = natProbeEvery
			n.publishNAT(st.class)
		}
	}
}
