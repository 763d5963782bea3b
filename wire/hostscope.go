package wire

import "github.com/gridlink/gridlink/identity"

// StripHostScoped returns m as it may cross a trunk between two hosts: a
// copy without the host-scoped addresses (identity.HostScoped: loopback,
// link-local, unspecified) of the machine identifiers it carries, or m
// itself when it carries none. Hubs pass a node's host-scoped addresses
// only over trunks whose ends are on one host (package hubserver,
// hostscope.go); m is not changed.
func StripHostScoped(m *Message) *Message {
	if m == nil {
		return nil
	}
	changed := false
	machine := func(mm *identity.Machine) {
		var dropped bool
		*mm, dropped = mm.WithoutHostScoped()
		changed = changed || dropped
	}
	holdings := func(hs []Holding) []Holding {
		hs = append([]Holding(nil), hs...)
		for i := range hs {
			machine(&hs[i].Node)
		}
		return hs
	}
	c := *m
	c.Found = edit(m.Found, func(f *Found) {
		f.Matches = append([]identity.Machine(nil), f.Matches...)
		for i := range f.Matches {
			machine(&f.Matches[i])
		}
	})
	c.Reverse = edit(m.Reverse, func(r *Reverse) { machine(&r.From) })
	c.Splice = edit(m.Splice, func(s *Splice) { s.From = edit(s.From, machine) })
	c.Machine = edit(m.Machine, machine)
	c.Refusal = edit(m.Refusal, func(r *Refusal) { r.Holder = edit(r.Holder, machine) })
	c.Claim = edit(m.Claim, func(cl *Claim) { machine(&cl.Holding.Node) })
	c.Claimed = edit(m.Claimed, func(cl *Claimed) { cl.Holders = holdings(cl.Holders) })
	c.AddrClaim = edit(m.AddrClaim, func(cl *AddrClaim) { machine(&cl.Holding.Node) })
	c.AddrClaimed = edit(m.AddrClaimed, func(cl *AddrClaimed) { cl.Holders = holdings(cl.Holders) })
	c.VirtualAck = edit(m.VirtualAck, func(v *VirtualAck) {
		v.Taken = append([]AddrTaken(nil), v.Taken...)
		for i := range v.Taken {
			machine(&v.Taken[i].Holder)
		}
	})
	c.Routed = edit(m.Routed, func(r *Routed) {
		if inner := StripHostScoped(r.Msg); inner != r.Msg {
			r.Msg, changed = inner, true
		}
	})
	if !changed {
		return m
	}
	return &c
}

// edit is a copy of *p changed by f, or nil for nil.
func edit[T any](p *T, f func(*T)) *T {
	if p == nil {
		return nil
	}
	c := *p
	f(&c)
	return &c
}
