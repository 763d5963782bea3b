package nat

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// Observers picks, from hubs' listening addresses, the ones to observe
// this host from: public ones first, at most max, one per hub (addrs lists
// each hub's addresses in turn: byHub). Private ones serve only when no
// public one exists (a private grid, where the hubs see what peers see): a
// hub inside this host's own NAT sees nothing of it.
func Observers(byHub [][]netip.AddrPort, max int) []netip.AddrPort {
	var public, private []netip.AddrPort
	for _, addrs := range byHub {
		for _, a := range addrs {
			if ip := a.Addr().Unmap(); ip.IsPrivate() || ip.IsLoopback() || ip.IsLinkLocalUnicast() {
				if len(private) < max {
					private = append(private, a)
				}
				continue
			}
			public = append(public, a)
			break
		}
	}
	if len(public) == 0 {
		return private
	}
	return public[:min(len(public), max)]
}

// Probe makes n observations of this host's connections, round-robin over
// observers (dropping any that cannot be reached), and classifies them.
func Probe(ctx context.Context, observers []netip.AddrPort, n int) (Class, error) {
	if len(observers) == 0 {
		return Class{}, errors.New("no hub lists an address to observe this host from")
	}
	var obs []Observation
	var errs []error
	live := append([]netip.AddrPort(nil), observers...)
	for i := 0; len(obs) < n && i < 2*n && len(live) > 0; i++ {
		k := i % len(live)
		o, err := Observe(ctx, nil, live[k])
		if err != nil {
			errs = append(errs, err)
			live = append(live[:k], live[k+1:]...) // unreachable from here: drop it
			continue
		}
		obs = append(obs, o)
	}
	if len(obs) < 2 {
		return Class{}, fmt.Errorf("too few observations of this host (%d): %w", len(obs), errors.Join(errs...))
	}
	return Classify(obs), nil
}

// Endpoints predicts where, as seen from outside, the next connection from
// local port will come from: one endpoint, or behind a sequential NAT
// (seq) the guesses most likely ones, after observing the NAT's counter at
// observer (the host's own other connections may move it on meanwhile).
func Endpoints(ctx context.Context, c Class, observer netip.AddrPort, port uint16, guesses int) (eps []netip.AddrPort, seq bool, err error) {
	if !c.Predictable() {
		return nil, false, fmt.Errorf("this host's NAT is %s: its next port cannot be predicted", c)
	}
	if !c.External.IsValid() {
		return nil, false, fmt.Errorf("this host's NAT (%s) showed no consistent external address", c)
	}
	if c.Allocation != Sequential {
		return []netip.AddrPort{netip.AddrPortFrom(c.External, port)}, false, nil
	}
	last, err := Observe(ctx, nil, observer)
	if err != nil {
		return nil, true, fmt.Errorf("observe the NAT's counter: %w", err)
	}
	for _, p := range sequentialGuesses(c.Delta, last, port, guesses) {
		eps = append(eps, netip.AddrPortFrom(c.External, p))
	}
	return eps, true, nil
}

// sequentialGuesses are the next ports of a sequential NAT of step delta
// after last, the most likely first. A small step may be a step of 1 that
// the host's other connections made look larger (the classifier takes the
// steps' common divisor: 3, 6, 3 says 3; a hub splicing to several hubs at
// once saw +5 on a +1 NAT). A step of up to 4: every port. A larger one:
// every port for the first half of the guesses, then the step's
// multiples, so both a step of 1 with a few ports taken in between and the
// step itself with a few taken are among them.
func sequentialGuesses(delta int, last Observation, local uint16, n int) []uint16 {
	step1 := Class{Allocation: Sequential, Delta: 1}
	if delta <= 4 {
		return Predict(step1, last, local, n)
	}
	out := Predict(step1, last, local, n/2)
	for _, p := range Predict(Class{Allocation: Sequential, Delta: delta}, last, local, n) {
		if len(out) == n {
			break
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// Aim picks which of a peer's predicted endpoints to connect to: all at
// once from one reserved port (each is a distinct connection, and a
// port-preserving NAT or none keeps this side's endpoint for every one),
// unless this host's own NAT is sequential: each connection would then
// take a new port and spoil its own prediction, so only the most likely.
func Aim(peer []netip.AddrPort, sequential bool) []netip.AddrPort {
	if sequential && len(peer) > 1 {
		return peer[:1]
	}
	return peer
}
