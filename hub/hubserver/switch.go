package hubserver

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/gridlink/gridlink/hub"
	"github.com/gridlink/gridlink/wire"
)

// overrun is how far a circuit may send beyond its window before the hub
// resets it. Honest ends never overrun (a hub sees every window grant
// before the sender does); the margin only bounds what a misbehaving end
// can make a hub queue: at most its window (up to wire.MaxWindow) plus
// this.
const overrun = wire.MaxWindow

// hcircuit is a circuit through this hub: two ends, each a (link,
// circuit number) pair, and the flow-control bookkeeping that bounds what
// the hub may have to queue for it.
type hcircuit struct {
	ends       [2]end // [0] toward the opener, [1] toward the target
	openWindow uint32 // the opener's grant, in force once accepted

	mu       sync.Mutex
	credit   [2]int64 // what ends[i] may still send
	fin      [2]bool
	accepted bool
	done     bool
}

type end struct {
	p  *peer
	id uint32
	ln *lane // the connection of p's trunk the circuit runs on (lanes.go)
}

type circRef struct {
	c    *hcircuit
	side int
}

// allocLocked picks a free circuit number of this hub's parity on p's
// link. p.cmu is held.
func (p *peer) allocLocked() uint32 {
	for {
		id := p.nextCirc
		if p.nextCirc >= 1<<32-3 {
			p.nextCirc = hub.FirstCircuit(p.dialed)
		} else {
			p.nextCirc += 2
		}
		if _, used := p.circuits[id]; !used {
			return id
		}
	}
}

// open handles a TOpen from p, received on its trunk's connection in:
// the next hop, a circuit number and a connection on its trunk, the
// mapping, and the open passed on; or a reset back saying why not.
func (h *Hub) open(p *peer, in *lane, f wire.Frame) error {
	id := f.Circuit
	if (id%2 == 1) == p.dialed {
		return fmt.Errorf("open on circuit %d: wrong parity for the side that %s the link", id, map[bool]string{true: "accepted", false: "dialled"}[p.dialed])
	}
	p.cmu.Lock()
	_, used := p.circuits[id]
	p.cmu.Unlock()
	if used {
		return fmt.Errorf("open on circuit %d, which is in use", id)
	}
	o, err := wire.DecodeOpen(f.Payload)
	if err != nil {
		return err
	}
	refuse := func(r refusal, reason string) error {
		h.counts.refuse(r)
		in.t.Send(wire.TReset, wire.FlagHub, id, []byte(reason))
		return nil
	}
	if !p.isHub {
		o.From = p.machine // a node speaks for itself only
		if o.ToHub.IsZero() {
			o.ToHub = h.id
		}
	}
	if o.ToHub.IsZero() {
		return refuse(refBadOpen, fmt.Sprintf("hub %s: open without a target hub", h.cfg.Name))
	}
	if o.TTL <= 0 {
		return refuse(refHops, fmt.Sprintf("hub %s: too many hops on the way to hub %s", h.cfg.Name, h.hubName(o.ToHub)))
	}
	o.TTL--
	var out *peer
	if o.ToHub == h.id {
		h.mu.Lock()
		out = h.nodes[o.ToNode]
		h.mu.Unlock()
		if out == nil {
			return refuse(refNotAttached, fmt.Sprintf("node %s is not attached to hub %s", o.ToNode.Short(), h.cfg.Name))
		}
	} else if out = h.nextHop(o.ToHub); out == nil {
		return refuse(refNoRoute, fmt.Sprintf("hub %s: no route to hub %s", h.cfg.Name, h.hubName(o.ToHub)))
	}
	// the opener's addresses as they may cross both trunks (hostscope.go)
	o.From = out.across(p.across(o.From))
	payload, err := json.Marshal(o)
	if err != nil {
		return refuse(refBadOpen, fmt.Sprintf("hub %s: %v", h.cfg.Name, err))
	}
	c := &hcircuit{openWindow: o.Window}
	c.credit[0] = wire.InitialWindow
	c.ends[0] = end{p, id, in}
	out.cmu.Lock()
	if out.gone() {
		out.cmu.Unlock()
		return refuse(refLinkLost, fmt.Sprintf("hub %s: link to %s lost", h.cfg.Name, out.t.Desc()))
	}
	oid := out.allocLocked()
	ol := out.pickLaneLocked()
	ol.n++
	c.ends[1] = end{out, oid, ol}
	out.circuits[oid] = circRef{c, 1}
	out.cmu.Unlock()
	p.cmu.Lock()
	if _, used := p.circuits[id]; used || p.gone() {
		p.cmu.Unlock()
		h.removeCircuit(c)
		if used {
			return fmt.Errorf("open on circuit %d, which is in use", id)
		}
		return nil
	}
	p.circuits[id] = circRef{c, 0}
	in.n++
	p.cmu.Unlock()
	h.counts.circuit()
	ol.t.Send(wire.TOpen, 0, oid, payload)
	return nil
}

// gone reports whether the link's circuits were already reset. p.cmu is
// held.
func (p *peer) gone() bool { return p.circuits == nil }

// switchFrame passes a circuit frame on to the circuit's other end.
func (h *Hub) switchFrame(p *peer, f wire.Frame) error {
	p.cmu.Lock()
	ref, ok := p.circuits[f.Circuit]
	p.cmu.Unlock()
	if !ok {
		return nil // a circuit already torn down: its last frames are dropped
	}
	c, side := ref.c, ref.side
	other := c.ends[1-side]
	switch f.Type {
	case wire.TData:
		c.mu.Lock()
		early := side == 1 && !c.accepted
		c.credit[side] -= int64(len(f.Payload))
		over := c.credit[side] < -overrun
		c.mu.Unlock()
		if early {
			h.abort(c, fmt.Sprintf("hub %s: data before accept on a circuit from %s", h.cfg.Name, p.t.Desc()))
			return nil
		}
		if over {
			h.abort(c, fmt.Sprintf("hub %s: circuit from %s overran its window", h.cfg.Name, p.t.Desc()))
			return nil
		}
		h.counts.switched(len(f.Payload))
	case wire.TWindow:
		n, err := wire.DecodeWindow(f.Payload)
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.credit[1-side] += int64(n)
		over := c.credit[1-side] > wire.MaxWindow+wire.InitialWindow
		c.mu.Unlock()
		if over {
			h.abort(c, fmt.Sprintf("hub %s: %s granted a window beyond %d bytes", h.cfg.Name, p.t.Desc(), wire.MaxWindow))
			return nil
		}
	case wire.TAccept:
		a, err := wire.DecodeAccept(f.Payload)
		if err != nil {
			return err
		}
		c.mu.Lock()
		bad := side != 1 || c.accepted
		if !bad {
			c.accepted = true
			c.credit[0] += int64(a.Window) - wire.InitialWindow
			c.credit[1] = int64(c.openWindow)
		}
		c.mu.Unlock()
		if bad {
			h.abort(c, fmt.Sprintf("hub %s: unexpected accept from %s", h.cfg.Name, p.t.Desc()))
			return nil
		}
	case wire.TFin:
		c.mu.Lock()
		c.fin[side] = true
		both := c.fin[0] && c.fin[1]
		c.mu.Unlock()
		other.ln.t.Send(wire.TFin, 0, other.id, nil)
		if both {
			h.removeCircuit(c)
		}
		return nil
	case wire.TReset:
		c.mu.Lock()
		c.done = true
		c.mu.Unlock()
		other.ln.t.Send(wire.TReset, f.Flags, other.id, f.Payload)
		h.removeCircuit(c)
		return nil
	}
	if f.Type == wire.TData && len(f.Payload) >= hub.KeepAbove {
		if body := f.Keep(); body != nil {
			other.ln.t.SendKept(other.id, body, len(f.Payload))
			return nil
		}
	}
	other.ln.t.Send(f.Type, 0, other.id, f.Payload)
	return nil
}

// abort resets a circuit toward both ends.
func (h *Hub) abort(c *hcircuit, reason string) {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return
	}
	c.done = true
	c.mu.Unlock()
	h.logf("%s", reason)
	for _, e := range c.ends {
		if e.p != nil {
			e.ln.t.Send(wire.TReset, wire.FlagHub, e.id, []byte(reason))
		}
	}
	h.removeCircuit(c)
}

// removeCircuit drops both ends' mappings.
func (h *Hub) removeCircuit(c *hcircuit) {
	for _, e := range c.ends {
		if e.p == nil {
			continue
		}
		e.p.cmu.Lock()
		if ref, ok := e.p.circuits[e.id]; ok && ref.c == c {
			delete(e.p.circuits, e.id)
			e.ln.n--
		}
		drained := e.p.retired && len(e.p.circuits) == 0
		e.p.cmu.Unlock()
		if drained {
			e.p.t.Close(errTrunkDrained)
		}
	}
}

// resetCircuits resets every circuit through p's link toward its other
// end, naming the lost link.
func (h *Hub) resetCircuits(p *peer, reason string) {
	p.cmu.Lock()
	refs := p.circuits
	p.circuits = nil // gone: no new circuits on this link
	p.cmu.Unlock()
	for _, ref := range refs {
		h.resetRef(ref, reason)
	}
}

// resetRef resets a circuit toward the end opposite ref's (whose link or
// connection was lost) and drops its mappings.
func (h *Hub) resetRef(ref circRef, reason string) {
	c := ref.c
	c.mu.Lock()
	done := c.done
	c.done = true
	c.mu.Unlock()
	if done {
		return
	}
	o := c.ends[1-ref.side]
	o.ln.t.Send(wire.TReset, wire.FlagHub, o.id, []byte(reason))
	h.removeCircuit(c)
}
