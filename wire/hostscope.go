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
	c := *m
	changed := false
	machine := func(mm identity.Machine) identity.Machine {
		out, dropped := mm.WithoutHostScoped()
		changed = changed || dropped
		return out
	}
	holdings := func(hs []Holding) []Holding {
		if hs == nil {
			return nil
		}
		out := make([]Holding, len(hs))
		for i, h := range hs {
			h.Node = machine(h.Node)
			out[i] = h
		}
		return out
	}
	if m.Found != nil {
		f := *m.Found
		f.Matches = nil
		for _, mm := range m.Found.Matches {
			f.Matches = append(f.Matches, machine(mm))
		}
		c.Found = &f
	}
	if m.Reverse != nil {
		r := *m.Reverse
		r.From = machine(r.From)
		c.Reverse = &r
	}
	if m.Splice != nil && m.Splice.From != nil {
		s := *m.Splice
		from := machine(*s.From)
		s.From = &from
		c.Splice = &s
	}
	if m.Machine != nil {
		mm := machine(*m.Machine)
		c.Machine = &mm
	}
	if m.Refusal != nil && m.Refusal.Holder != nil {
		r := *m.Refusal
		h := machine(*r.Holder)
		r.Holder = &h
		c.Refusal = &r
	}
	if m.Claim != nil {
		cl := *m.Claim
		cl.Holding.Node = machine(cl.Holding.Node)
		c.Claim = &cl
	}
	if m.Claimed != nil {
		cl := *m.Claimed
		cl.Holders = holdings(cl.Holders)
		c.Claimed = &cl
	}
	if m.AddrClaim != nil {
		cl := *m.AddrClaim
		cl.Holding.Node = machine(cl.Holding.Node)
		c.AddrClaim = &cl
	}
	if m.AddrClaimed != nil {
		cl := *m.AddrClaimed
		cl.Holders = holdings(cl.Holders)
		c.AddrClaimed = &cl
	}
	if m.VirtualAck != nil && m.VirtualAck.Taken != nil {
		v := *m.VirtualAck
		v.Taken = make([]AddrTaken, len(m.VirtualAck.Taken))
		for i, t := range m.VirtualAck.Taken {
			t.Holder = machine(t.Holder)
			v.Taken[i] = t
		}
		c.VirtualAck = &v
	}
	if m.Routed != nil && m.Routed.Msg != nil {
		if inner := StripHostScoped(m.Routed.Msg); inner != m.Routed.Msg {
			r := *m.Routed
			r.Msg = inner
			c.Routed = &r
			changed = true
		}
	}
	if !changed {
		return m
	}
	return &c
}
